-- schedule_get: one schedule's definition, state and fired ticks.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] name
-- Returns: {now_ms} when there is none, else {now_ms, definition, state, fired ticks ('' none)}
local K = queue_keys()
local now = now_ms()
local def = redis.call('HGET', K.schedules, ARGV[1])
local st = redis.call('HGET', K.schedule_state, ARGV[1])
if not def or not st then return {now} end
return {now, def, st, redis.call('HGET', K.schedule_fired, ARGV[1]) or ''}
