-- schedule_delete: removes a schedule. Tasks it already enqueued stay, but for the ticks fired
--   ahead whose tasks still wait for their due time (sched_withdraw): those ticks never came.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] name
-- Returns: {now_ms, 1 if a schedule was removed else 0}
local K = queue_keys()
local state, index, ticks, defs = K.schedule_state, K.schedule_next, K.schedule_fired,
  K.schedules
local name = ARGV[1]
local now = now_ms()
local st = redis.call('HGET', state, name)
if st then
  local _, last, _, _, fired, _, prev = sched_state(st)
  if last then
    local S, N = sched_ticks(redis.call('HGET', ticks, name), last, prev)
    sched_withdraw(K, name, S, N, fired, now)
  end
end
local n = redis.call('HDEL', defs, name)
n = n + redis.call('HDEL', state, name)
redis.call('HDEL', ticks, name)
redis.call('ZREM', index, name)
if n > 0 then return {now, 1} end
return {now, 0}
