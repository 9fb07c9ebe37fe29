-- history: a queue's per-minute activity of the last hour, as kept by claim, ack, nack and
-- recover (see hist_add in lib/stats.lua). Read-only.
-- KEYS: queue_keys, Span::Finish (keys.rs)
-- ARGV: none
-- Returns: {now_ms, field, value, field, value, ...} with fields "<minute>:<counter>"
local K = queue_keys()
local out = {now_ms()}
local fields = redis.call('HGETALL', K.hist)
for i = 1, #fields do out[i + 1] = fields[i] end
return out
