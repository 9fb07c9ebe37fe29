-- webhook_set: stores the queue's push delivery target (replacing any earlier one).
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] url, ARGV[2] secret ('' = keep the stored one, else ARGV[3]), ARGV[3] new random
--   secret to use when none is given or stored, ARGV[4] concurrency, ARGV[5] timeout_ms,
--   ARGV[6] rotation_ms: how long deliveries stay signed with a replaced secret too,
--   ARGV[7] most replaced secrets kept at once
-- Returns: {now_ms, secret in force, 1 if a webhook existed before else 0, the replaced
--   secrets still signing as JSON [[secret, until_ms], ...], newest first}
-- The client validates every argument before calling; the script only decides the secret, so
-- "keep the stored secret" is atomic with the write. Each replaced secret keeps signing until
-- its own window ends, so receivers can switch at their own pace, even across several changes
-- in one window.
local K = queue_keys()
local webhook = K.webhook
local now = now_ms()
local old = redis.call('HGET', webhook, 'secret')
local secret = ARGV[2]
if secret == '' then
  if old then secret = old else secret = ARGV[3] end
end

-- the replaced secrets whose window is still open, newest first, none equal to the new one
local kept = {}
local function keep(s, until_ms)
  if s and s ~= secret and tonumber(until_ms) > now and #kept < tonumber(ARGV[7]) then
    kept[#kept + 1] = {s, until_ms}
  end
end
if old and old ~= secret then keep(old, int(now + tonumber(ARGV[6]))) end
local stored = redis.call('HGET', webhook, 'previous_secrets')
if stored then
  for _, e in ipairs(cjson.decode(stored)) do keep(e[1], e[2]) end
end
-- earlier versions kept one replaced secret in two fields
local legacy = redis.call('HMGET', webhook, 'previous_secret', 'previous_until_ms')
if legacy[1] then
  keep(legacy[1], legacy[2])
  redis.call('HDEL', webhook, 'previous_secret', 'previous_until_ms')
end
local listed = '[]'
if #kept > 0 then
  listed = cjson.encode(kept)
  redis.call('HSET', webhook, 'previous_secrets', listed)
else
  redis.call('HDEL', webhook, 'previous_secrets')
end

redis.call('HSET', webhook, 'url', ARGV[1], 'secret', secret, 'concurrency', ARGV[4],
  'timeout_ms', ARGV[5], 'updated_at_ms', int(now))
-- the last delivery error was the old target's
redis.call('HDEL', webhook, 'last_error', 'last_error_at_ms')
local existed = 0
if old then existed = 1 end
return {now, secret, existed, listed}
