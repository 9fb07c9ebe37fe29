-- webhook_clear: removes the queue's push delivery target.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV: none
-- Returns: {now_ms, 1 if a webhook was removed else 0}
local K = queue_keys()
local now = now_ms()
return {now, redis.call('DEL', K.webhook)}
