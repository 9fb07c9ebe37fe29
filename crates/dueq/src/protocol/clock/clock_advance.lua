-- clock_advance: moves the test clock forward, by an amount or to a time, and tells every
--   process on this Redis at once (channel dueq:test_clock), so claimers, schedule firers and
--   recoverers look again at the new time instead of sleeping on the old one.
-- KEYS: global_key('test_clock'): dueq:test_clock (string: the offset of the virtual clock
--   from Redis TIME, ms; absent after a FLUSHALL, which puts the clock back at Redis time:
--   only a process on the test clock calls this, so the key is written again)
-- ARGV[1] 'by' or 'to'; ARGV[2] ms: how far (by) or the epoch ms time to move to (to);
--   ARGV[3] the latest time the clock may show, epoch ms
-- Returns: {'backwards', now_ms} for a time before now (the clock moves forward only); {'too_far', now_ms} past ARGV[3]; else
--   {'ok', now_ms, offset_ms}: the clock as moved
local key = global_key('test_clock').test_clock
local offset = tonumber(redis.call('GET', key)) or 0
-- Redis TIME itself: now_ms() is already the virtual clock here
local t = redis.call('TIME')
local redis_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now = redis_ms + offset
local ms = tonumber(ARGV[2])
local to = now + ms
if ARGV[1] == 'to' then
  if ms < now then return {'backwards', now} end
  to = ms
end
if to > tonumber(ARGV[3]) then return {'too_far', now} end
offset = to - redis_ms
redis.call('SET', key, int(offset))
redis.call('PUBLISH', key, int(to))
return {'ok', to, offset}
