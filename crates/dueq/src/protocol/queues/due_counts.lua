-- due_counts: how many scheduled tasks fall due in each of the next 60 minutes and the next 24
--   hours by the Redis clock, without scanning: one ZCOUNT per bucket per scheduled set (the
--   priorities in use and the groups' `gdue`), O(buckets x sets x log n); a set's buckets past
--   its last task are not asked for.
-- KEYS: queue_keys, Span::Scheduled (keys.rs)
-- ARGV: none
-- Returns: {now_ms, due (due time at or before now), later (due after now + 24 h), then 60
--   minute counts, then 24 hour counts}: minute i (from 1) counts due times in
--   (now + (i - 1) min, now + i min], hour i those in (now + (i - 1) h, now + i h]; hour 1 is
--   the sum of the minutes
local K = queue_keys()
local MINUTE_MS, HOUR_MS, MINUTES, HOURS = 60000, 3600000, 60, 24
local now = now_ms()
local minutes, hours = {}, {}
for i = 1, MINUTES do minutes[i] = 0 end
for i = 1, HOURS do hours[i] = 0 end
local due, later = 0, 0
local pl, pn = prios_of(redis.call('HGET', K.meta, 'prio'))
-- priority 0's set is `sched` (prios_of lists 0 first), the others come from `K.s`
local sets, n = {K.gdue, K.sched}, 2
for i = 2, pn do
  n = n + 1
  sets[n] = K.s[pl[i]]
end
-- Counts the tasks of `z` in each bucket of `width` ms from `from` into `into`, while
-- `left` (tasks of `z` not counted yet) is above 0; returns the new `left`.
local function fill(z, into, count, from, width, left)
  local i = 1
  while left > 0 and i <= count do
    local c = redis.call('ZCOUNT', z, '(' .. int(from + (i - 1) * width), int(from + i * width))
    into[i] = into[i] + c
    left = left - c
    i = i + 1
  end
  return left
end
for s = 1, n do
  local z = sets[s]
  local left = redis.call('ZCARD', z)
  if left > 0 then
    local c = redis.call('ZCOUNT', z, '-inf', int(now))
    due = due + c
    left = fill(z, minutes, MINUTES, now, MINUTE_MS, left - c)
    -- hours 2.. start where the minutes end
    local rest = {}
    for i = 1, HOURS - 1 do rest[i] = 0 end
    left = fill(z, rest, HOURS - 1, now + HOUR_MS, HOUR_MS, left)
    for i = 1, HOURS - 1 do hours[i + 1] = hours[i + 1] + rest[i] end
    later = later + left
  end
end
for i = 1, MINUTES do hours[1] = hours[1] + minutes[i] end
local out = {now, due, later}
for i = 1, MINUTES do out[3 + i] = minutes[i] end
for i = 1, HOURS do out[3 + MINUTES + i] = hours[i] end
return out
