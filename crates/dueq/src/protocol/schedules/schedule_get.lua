-- schedule_get: one schedule's definition, state and fired ticks.
-- KEYS[1] schedules  KEYS[2] schedule_state  KEYS[3] schedule_fired
-- ARGV[1] name
-- Returns: {now_ms} when there is none, else {now_ms, definition, state, fired ticks ('' none)}
local now = now_ms()
local def = redis.call('HGET', KEYS[1], ARGV[1])
local st = redis.call('HGET', KEYS[2], ARGV[1])
if not def or not st then return {now} end
return {now, def, st, redis.call('HGET', KEYS[3], ARGV[1]) or ''}
