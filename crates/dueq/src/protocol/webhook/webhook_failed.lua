-- webhook_failed: notes the error of a failed delivery on the queue's webhook, for people
--   to see (the dashboard, GET .../webhook); nothing when the queue has no webhook.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] error text (the client caps its length)
-- Returns: {now_ms, 1 noted | 0 no webhook}
local K = queue_keys()
local webhook = K.webhook
local now = now_ms()
if redis.call('EXISTS', webhook) == 0 then return {now, 0} end
redis.call('HSET', webhook, 'last_error', ARGV[1], 'last_error_at_ms', int(now))
return {now, 1}
