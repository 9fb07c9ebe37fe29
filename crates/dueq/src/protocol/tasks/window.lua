-- window: the finished task that holds a business key in its unique window (windows.lua).
-- KEYS: queue_keys, Span::Finish (keys.rs)
-- ARGV[1] the business key
-- Returns: {now_ms} when the key is in no window (an ended one not yet dropped included), else
--   {now_ms, id, state ('succeeded' | 'dead' | 'cancelled' | 'expired'), due_at_ms, ends_at_ms}
local K = queue_keys()
local now = now_ms()
local state, id, due, _, ends = window_of(K, ARGV[1], now)
if not state then return {now} end
return {now, id, state, due, ends}
