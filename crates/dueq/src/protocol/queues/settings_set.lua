-- settings_set: changes a queue's stored settings (pause, defaults, caps, limits, alert
-- thresholds); every process reads them at its next claim, and idle workers are woken.
-- KEYS: queue_keys, Span::Finish (keys.rs)
-- ARGV[1] wake channel, ARGV[2] n, then n name, value pairs to set, then names to clear
-- The name `seq_floor` is not stored: it raises the task sequence to at least its value (a
-- partition p numbers its tasks from p << 40, so an id names its partition).
-- Returns: {now_ms, settings version}, or an error for an unknown name (nothing written)
local K = queue_keys()
local meta, stats = K.meta, K.stats
local now = now_ms()
local allowed = {paused = true, dead_max = true, done_max = true, max_attempts = true,
  lease_ms = true, backoff_base_ms = true, backoff_factor = true, backoff_max_ms = true,
  rate_max = true, rate_per_ms = true, group_rate_max = true, group_rate_per_ms = true,
  concurrency = true, group_concurrency = true, alert_due_age_ms = true, alert_due_count = true,
  on_expire = true, partitions = true, unique_for_ms = true, seq_floor = true}
local n = tonumber(ARGV[2])
local names = {}
for i = 1, n do names[i] = ARGV[1 + 2 * i] end
for i = 3 + 2 * n, #ARGV do names[#names + 1] = ARGV[i] end
for i = 1, #names do
  if not allowed[names[i]] then return redis.error_reply('dueq: unknown setting ' .. names[i]) end
end
local watched = {'group_concurrency', 'group_rate_max', 'group_rate_per_ms', 'rate_max',
  'concurrency'}
local before = redis.call('HMGET', meta, unpack(watched))
for i = 1, n do
  local name, value = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  if name ~= 'seq_floor' then
    redis.call('HSET', meta, name, value)
  elseif tonumber(redis.call('HGET', meta, 'seq') or '0') < tonumber(value) then
    redis.call('HSET', meta, 'seq', value)
  end
end
for i = 3 + 2 * n, #ARGV do redis.call('HDEL', meta, ARGV[i]) end
local after = redis.call('HMGET', meta, unpack(watched))
-- Groups held back by a limit that changed try again at the next claim (which holds them
-- again if the new limit says so): up to 10 000 per change; beyond that, parked groups go
-- as their running tasks finish and rate-held ones when their window opens.
local budget = 10000
if after[1] ~= before[1] then
  local cursor = '0'
  repeat
    local scan = redis.call('HSCAN', K.gparked, cursor, 'COUNT', 500)
    cursor = scan[1]
    for i = 1, #scan[2], 2 do
      local g = scan[2][i]
      redis.call('HDEL', K.gparked, g)
      local head = ghead(K, g)
      if head then redis.call('ZADD', K.gready, math.max(head, now), g) end
      budget = budget - 1
    end
  until cursor == '0' or budget <= 0
end
if after[2] ~= before[2] or after[3] ~= before[3] then
  local held = redis.call('ZRANGEBYSCORE', K.gready, '(' .. int(now), '+inf', 'LIMIT', 0, budget)
  for i = 1, #held do
    local head = ghead(K, held[i])
    if head and head <= now then redis.call('ZADD', K.gready, now, held[i]) end
  end
end
-- a queue limit removed ends its throttled time
for _, l in ipairs({{'rate', 4}, {'concurrency', 5}}) do
  local since = not after[l[2]] and redis.call('HGET', meta, 'thr_' .. l[1])
  if since then
    redis.call('HINCRBY', stats, 'throttled_ms_' .. l[1], math.max(now - tonumber(since), 0))
    redis.call('HDEL', meta, 'thr_' .. l[1])
  end
end
-- no rate limit left: drop the logs
if not redis.call('HGET', meta, 'rate_max') and not redis.call('HGET', meta, 'group_rate_max') then
  redis.call('DEL', K.rate, K.rate_n, K.rate_idle)
end
local v = redis.call('HINCRBY', meta, 'settings_v', 1)
redis.call('PUBLISH', ARGV[1], int(now))
return {now, v}
