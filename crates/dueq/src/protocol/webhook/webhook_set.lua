-- webhook_set: stores the queue's push delivery target (replacing any earlier one).
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] url, ARGV[2] secret ('' = keep the stored one, else ARGV[3]), ARGV[3] new random
--   secret to use when none is given or stored, ARGV[4] concurrency, ARGV[5] timeout_ms,
--   ARGV[6] rotation_ms: how long deliveries stay signed with a replaced secret too
-- Returns: {now_ms, secret in force, 1 if a webhook existed before else 0, the replaced secret
--   still signing ('' = none), until when (ms; -1 = none)}
-- The client validates every argument before calling; the script only decides the secret, so
-- "keep the stored secret" is atomic with the write. A new secret keeps the one it replaces
-- as previous_secret until previous_until_ms, so receivers can switch at their own pace.
local K = queue_keys()
local webhook = K.webhook
local now = now_ms()
local old = redis.call('HGET', webhook, 'secret')
local secret = ARGV[2]
if secret == '' then
  if old then secret = old else secret = ARGV[3] end
end
if old and old ~= secret then
  redis.call('HSET', webhook, 'previous_secret', old,
    'previous_until_ms', int(now + tonumber(ARGV[6])))
end
redis.call('HSET', webhook, 'url', ARGV[1], 'secret', secret, 'concurrency', ARGV[4],
  'timeout_ms', ARGV[5], 'updated_at_ms', int(now))
-- the last delivery error was the old target's
redis.call('HDEL', webhook, 'last_error', 'last_error_at_ms')
local existed = 0
if old then existed = 1 end
local prev = redis.call('HMGET', webhook, 'previous_secret', 'previous_until_ms')
return {now, secret, existed, prev[1] or '', tonumber(prev[2] or '-1')}
