-- schedule_get: one schedule's definition and state.
-- KEYS[1] schedules  KEYS[2] schedule_state
-- ARGV[1] name
-- Returns: {now_ms} when there is none, else {now_ms, definition, state}
local now = now_ms()
local def = redis.call('HGET', KEYS[1], ARGV[1])
local st = redis.call('HGET', KEYS[2], ARGV[1])
if not def or not st then return {now} end
return {now, def, st}
