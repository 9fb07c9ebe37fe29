-- webhook_clear: removes the queue's push delivery target.
-- KEYS[1] webhook (hash)
-- ARGV: none
-- Returns: {now_ms, 1 if a webhook was removed else 0}
local now = now_ms()
return {now, redis.call('DEL', KEYS[1])}
