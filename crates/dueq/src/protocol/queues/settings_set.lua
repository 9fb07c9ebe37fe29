-- settings_set: changes a queue's stored settings (pause, defaults, caps, limits, alert
-- thresholds); every process reads them at its next claim, and idle workers are woken.
-- KEYS[1] meta  KEYS[2..10] group keys (see lib.lua)
-- ARGV[1] wake channel, ARGV[2] n, then n name, value pairs to set, then names to clear
-- Returns: {now_ms, settings version}, or an error for an unknown name (nothing written)
local meta = KEYS[1]
local G = group_keys(2)
local now = now_ms()
local allowed = {paused = true, dead_max = true, done_max = true, max_attempts = true,
  lease_ms = true, backoff_base_ms = true, backoff_factor = true, backoff_max_ms = true,
  rate_max = true, rate_per_ms = true, group_rate_max = true, group_rate_per_ms = true,
  concurrency = true, group_concurrency = true, alert_due_age_ms = true, alert_due_count = true}
local n = tonumber(ARGV[2])
local names = {}
for i = 1, n do names[i] = ARGV[1 + 2 * i] end
for i = 3 + 2 * n, #ARGV do names[#names + 1] = ARGV[i] end
for i = 1, #names do
  if not allowed[names[i]] then return redis.error_reply('dueq: unknown setting ' .. names[i]) end
end
local gconc_before = redis.call('HGET', meta, 'group_concurrency')
for i = 1, n do redis.call('HSET', meta, ARGV[1 + 2 * i], ARGV[2 + 2 * i]) end
for i = 3 + 2 * n, #ARGV do redis.call('HDEL', meta, ARGV[i]) end
-- a changed group concurrency limit lets parked groups try again (up to 1 000 per change;
-- the rest are let go as their running tasks finish)
if redis.call('HGET', meta, 'group_concurrency') ~= gconc_before then
  local parked = redis.call('HSCAN', G.gparked, '0', 'COUNT', 1000)[2]
  for i = 1, #parked, 2 do
    local g = parked[i]
    redis.call('HDEL', G.gparked, g)
    local head = ghead(G, gprefix(g))
    if head then redis.call('ZADD', G.gready, math.max(head, now), g) end
  end
end
-- no rate limit left: drop the logs
if not redis.call('HGET', meta, 'rate_max') and not redis.call('HGET', meta, 'group_rate_max') then
  redis.call('DEL', G.rate, G.rate_n, G.rate_idle)
end
local v = redis.call('HINCRBY', meta, 'settings_v', 1)
redis.call('PUBLISH', ARGV[1], int(now))
return {now, v}
