-- dead_list: one page of the dead-letter queue, newest first.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] offset, ARGV[2] limit (1..1000)
-- Returns: {now_ms, total, the queue's max_attempts, the queue's lease_ms (for records that
--   leave them 0), then per task: id, died_at_ms, record, last error ('' = none), group
--   ('' = none)}
local K = queue_keys()
local dead, tasks = K.dead, K.tasks
local now = now_ms()
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local page = redis.call('ZREVRANGE', dead, offset, offset + limit - 1, 'WITHSCORES')
local d = redis.call('HMGET', K.meta, 'max_attempts', 'lease_ms')
local out = {now, redis.call('ZCARD', dead), d[1] or '5', d[2] or '30000'}
for i = 1, #page, 2 do
  local rec = redis.call('HGET', tasks, page[i])
  if rec then
    out[#out + 1] = page[i]
    out[#out + 1] = tonumber(page[i + 1])
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', K.errors, page[i]) or ''
    out[#out + 1] = redis.call('HGET', K.groups, page[i]) or ''
  end
end
return out
