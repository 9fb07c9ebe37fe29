-- cancel: removes a scheduled task (by id or business key) before any worker gets it.
-- KEYS: queue_keys, Span::Scheduled (keys.rs)
-- ARGV[1] 'id' | 'key', ARGV[2] the id or key
-- Returns: {now_ms, outcome, id, window_ends_ms}: outcome 'cancelled' | 'in_progress' |
--   'not_found'; window_ends_ms: when the unique window the cancel opened ends (-1: none)
local K = queue_keys()
local now = now_ms()
local id = resolve(K.keys, ARGV[1], ARGV[2])
if not id then return {now, 'not_found', '', -1} end
local removed, ends = unschedule(K, id, redis.call('HGET', K.tasks, id), now)
if removed then return {now, 'cancelled', id, ends or -1} end
if redis.call('HEXISTS', K.leases, id) == 1 or redis.call('ZSCORE', K.active, id) then
  return {now, 'in_progress', id, -1}
end
-- a key whose task is gone: drop the stale index entry
if ARGV[1] == 'key' then redis.call('HDEL', K.keys, ARGV[2]) end
return {now, 'not_found', id, -1}
