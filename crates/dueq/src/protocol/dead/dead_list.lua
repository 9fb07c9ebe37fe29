-- dead_list: one page of the dead-letter queue, newest first.
-- KEYS[1] dead  KEYS[2] tasks  KEYS[3] errors
-- ARGV[1] offset, ARGV[2] limit (1..1000)
-- Returns: {now_ms, total, then per task: id, died_at_ms, record, last error ('' = none)}
local dead, tasks = KEYS[1], KEYS[2]
local now = now_ms()
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local page = redis.call('ZREVRANGE', dead, offset, offset + limit - 1, 'WITHSCORES')
local out = {now, redis.call('ZCARD', dead)}
for i = 1, #page, 2 do
  local rec = redis.call('HGET', tasks, page[i])
  if rec then
    out[#out + 1] = page[i]
    out[#out + 1] = tonumber(page[i + 1])
    out[#out + 1] = rec
    out[#out + 1] = redis.call('HGET', KEYS[3], page[i]) or ''
  end
end
return out
