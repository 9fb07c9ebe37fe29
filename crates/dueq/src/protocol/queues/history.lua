-- history: a queue's per-minute activity of the last hour, as kept by claim, ack, nack and
-- recover (see hist_add in lib/). Read-only.
-- KEYS[1] hist
-- ARGV: none
-- Returns: {now_ms, field, value, field, value, ...} with fields "<minute>:<counter>"
local out = {now_ms()}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields do out[i + 1] = fields[i] end
return out
