-- reschedule: moves the due time of a scheduled task (by id or business key).
-- KEYS: queue_keys, Span::Scheduled (keys.rs); a task keeps its priority and its expiry
-- ARGV[1] wake channel, ARGV[2] 'id' | 'key', ARGV[3] the id or key,
-- ARGV[4] due kind ('at' | 'delay'), ARGV[5] due value (ms)
-- Returns: {now_ms, outcome, id, due_at_ms}: outcome 'rescheduled' | 'in_progress' | 'not_found'
--   | 'bad_due' (past year 9999; nothing written)
local K = queue_keys()
local active, leases, tasks, keys = K.active, K.leases, K.tasks, K.keys
local now = now_ms()
local id = resolve(keys, ARGV[2], ARGV[3])
if not id then return {now, 'not_found', '', 0} end
local due = tonumber(ARGV[5])
if ARGV[4] == 'delay' then due = now + due end
if due > MAX_DUE_MS then return {now, 'bad_due', id, 0} end
local rec = redis.call('HGET', tasks, id)
local set = K.s[rec and rec_ok(rec) and rec_prio(rec) or 0]
if redis.call('ZSCORE', set, id) then
  if rec and rec_ok(rec) then
    local before = earliest_due(K)
    redis.call('HSET', tasks, id, rec_update(rec, nil, due))
    redis.call('ZADD', set, due, id)
    wake(ARGV[1], due, before)
    return {now, 'rescheduled', id, due}
  end
end
local gdue = redis.call('ZSCORE', K.gdue, id)
local g = gdue and redis.call('HGET', K.groups, id)
if g then
  if rec and rec_ok(rec) then
    local before = earliest_due(K)
    redis.call('HSET', tasks, id, rec_update(rec, nil, due))
    gunschedule(K, g, id, tonumber(gdue), rec_prio(rec))
    gschedule(K, g, id, due, now, rec_prio(rec))
    wake(ARGV[1], due, before)
    return {now, 'rescheduled', id, due}
  end
end
if redis.call('HEXISTS', leases, id) == 1 or redis.call('ZSCORE', active, id) then
  return {now, 'in_progress', id, 0}
end
return {now, 'not_found', id, 0}
