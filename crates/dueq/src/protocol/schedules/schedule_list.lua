-- schedule_list: one page of a queue's schedules (HSCAN order; a page holds about ARGV[2]).
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] cursor ('0' to start), ARGV[2] page size hint (at most 1000)
-- Returns: {now_ms, next cursor ('0' at the end), then name, definition, state, fired ticks
--   ('' none) per schedule}
local K = queue_keys()
local now = now_ms()
local r = redis.call('HSCAN', K.schedule_state, ARGV[1], 'COUNT', math.min(tonumber(ARGV[2]), 1000))
local out, n = {now, r[1]}, 2
local page = r[2]
for i = 1, #page, 2 do
  local def = redis.call('HGET', K.schedules, page[i])
  if def then
    out[n + 1] = page[i]; out[n + 2] = def; out[n + 3] = page[i + 1]
    out[n + 4] = redis.call('HGET', K.schedule_fired, page[i]) or ''
    n = n + 4
  end
end
return out
