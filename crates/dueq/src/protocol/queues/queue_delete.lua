-- queue_delete: deletes one queue's (or one partition's) keys: tasks in every state, settings,
--   counters, schedules and webhook, unless (without `force`) a task is scheduled or active.
--   UNLINK frees the memory in the background, so a large queue does not block Redis.
-- KEYS: queue_keys, Span::All (keys.rs): every key of the partition
-- ARGV[1] force (0|1)
-- Returns: {now_ms, code}: 1 deleted, 0 not empty (nothing written)
local K = queue_keys()
local now = now_ms()
if ARGV[1] ~= '1' then
  local busy = active_count(K) + redis.call('ZCARD', K.gdue)
  for p = 0, 9 do busy = busy + redis.call('ZCARD', K.s[p]) end
  if busy > 0 then return {now, 0} end
end
-- every key the call passed: the whole partition
redis.call('UNLINK', unpack(KEYS))
return {now, 1}
