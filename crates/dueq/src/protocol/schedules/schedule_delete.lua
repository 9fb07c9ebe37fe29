-- schedule_delete: removes a schedule (tasks it already enqueued stay).
-- KEYS[1] schedules  KEYS[2] schedule_state  KEYS[3] schedule_next
-- ARGV[1] name
-- Returns: {now_ms, 1 if a schedule was removed else 0}
local now = now_ms()
local n = redis.call('HDEL', KEYS[1], ARGV[1])
n = n + redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if n > 0 then return {now, 1} end
return {now, 0}
