-- cancel: removes a scheduled task (by id or business key) before any worker gets it.
-- KEYS[1] sched  KEYS[2] active  KEYS[3] leases  KEYS[4] tasks  KEYS[5] keys  KEYS[6] stats
-- KEYS[7] errors  KEYS[8..16] group keys, KEYS[17..26] option keys (see lib/)  KEYS[27] meta
-- ARGV[1] 'id' | 'key', ARGV[2] the id or key
-- Returns: {now_ms, outcome, id}: outcome 'cancelled' | 'in_progress' | 'not_found'
local active, leases, tasks, keys, stats = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G = group_keys(8)
G.meta = KEYS[27]
local O = option_keys(17)
local now = now_ms()
local id = resolve(keys, ARGV[1], ARGV[2])
if not id then return {now, 'not_found', ''} end
if unschedule({tasks = tasks, keys = keys, errors = KEYS[7], stats = stats}, G, O, id,
    redis.call('HGET', tasks, id)) then
  return {now, 'cancelled', id}
end
if redis.call('HEXISTS', leases, id) == 1 or redis.call('ZSCORE', active, id) then
  return {now, 'in_progress', id}
end
-- a key whose task is gone: drop the stale index entry
if ARGV[1] == 'key' then redis.call('HDEL', keys, ARGV[2]) end
return {now, 'not_found', id}
