-- dead_retry: moves dead tasks back to scheduled, due now, with a fresh attempt count.
-- KEYS[1] sched  KEYS[2] dead  KEYS[3] tasks  KEYS[4] keys  KEYS[5] errors
-- KEYS[6..14] group keys (see lib.lua; a task retried goes back to its group), KEYS[15..24]
--   option keys (see lib.lua; it goes back to its priority's set, and has no expiry)
-- KEYS[25] meta  KEYS[26] dead_keys
-- ARGV[1] wake channel, ARGV[2] n, then n task ids
-- Returns: {now_ms, then per task: 'retried' | 'not_found' | 'conflict' (its business key is
--   live again on another task)}
local sched, dead, tasks, keys = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local G = group_keys(6)
G.meta = KEYS[25]
local O = option_keys(15)
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {now}
local before = earliest_due(sched, G)
local any = false
for i = 1, n do
  local id = ARGV[2 + i]
  local rec = redis.call('ZSCORE', dead, id) and redis.call('HGET', tasks, id)
  if not rec or not rec_ok(rec) then
    out[#out + 1] = 'not_found'
  else
    local key = rec_key(rec)
    local holder = key ~= '' and redis.call('HGET', keys, key)
    if holder and holder ~= id then
      out[#out + 1] = 'conflict'
    else
      redis.call('ZREM', dead, id)
      dead_key_drop(KEYS[26], rec, id)
      redis.call('HSET', tasks, id, rec_update(rec, 0, now))
      -- attempts count afresh, so the old error goes too (a claim only looks for errors of
      -- tasks with attempts behind them)
      redis.call('HDEL', KEYS[5], id)
      local g = redis.call('HGET', G.groups, id)
      if g then gschedule(G, g, id, now, now, rec_prio(rec)) else redis.call('ZADD', O.s[rec_prio(rec)], now, id) end
      if key ~= '' then redis.call('HSET', keys, key, id) end
      out[#out + 1] = 'retried'
      any = true
    end
  end
end
if any then wake(ARGV[1], now, before) end
return out
