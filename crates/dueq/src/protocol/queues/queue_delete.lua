-- queue_delete: deletes one queue's (or one partition's) keys: tasks in every state, settings,
--   counters, schedules and webhook, unless (without `force`) a task is scheduled or active.
--   UNLINK frees the memory in the background, so a large queue does not block Redis.
-- KEYS[1] sched  KEYS[2] active  KEYS[3] gdue, then every other key of the partition, the
--   sets of priorities 1 to 9 first
-- ARGV[1] force (0|1), ARGV[2] n: the n keys after gdue are priority sets (checked for tasks)
-- Returns: {now_ms, code}: 1 deleted, 0 not empty (nothing written)
local now = now_ms()
if ARGV[1] ~= '1' then
  local busy = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
  for i = 1, tonumber(ARGV[2]) do busy = busy + redis.call('ZCARD', KEYS[3 + i]) end
  if busy > 0 then return {now, 0} end
end
redis.call('UNLINK', unpack(KEYS))
return {now, 1}
