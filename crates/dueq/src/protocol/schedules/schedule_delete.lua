-- schedule_delete: removes a schedule. Tasks it already enqueued stay, but for the ticks fired
--   ahead whose tasks still wait for their due time (sched_withdraw): those ticks never came.
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] errors
--   KEYS[7] schedule_state  KEYS[8] schedule_next  KEYS[9..17] group keys, KEYS[18..27]
--   option keys (see lib/)  KEYS[28] schedule_fired  KEYS[29] schedules
-- ARGV[1] name
-- Returns: {now_ms, 1 if a schedule was removed else 0}
local T = {tasks = KEYS[2], keys = KEYS[3], stats = KEYS[5], errors = KEYS[6]}
local G = group_keys(9)
G.meta = KEYS[4]
local O = option_keys(18)
local state, index, ticks, defs = KEYS[7], KEYS[8], KEYS[28], KEYS[29]
local name = ARGV[1]
local now = now_ms()
local st = redis.call('HGET', state, name)
if st then
  local _, last, _, _, fired, _, prev = sched_state(st)
  if last then
    local S, N = sched_ticks(redis.call('HGET', ticks, name), last, prev)
    sched_withdraw(T, G, O, name, S, N, fired, now)
  end
end
local n = redis.call('HDEL', defs, name)
n = n + redis.call('HDEL', state, name)
redis.call('HDEL', ticks, name)
redis.call('ZREM', index, name)
if n > 0 then return {now, 1} end
return {now, 0}
