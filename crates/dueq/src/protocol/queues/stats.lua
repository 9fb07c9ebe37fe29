-- stats: counts and timings of one queue, without scanning (O(log n)).
-- KEYS[1] sched  KEYS[2] active  KEYS[3] dead  KEYS[4] done  KEYS[5] stats  KEYS[6] meta
-- ARGV: none
-- Returns: {now_ms, scheduled, due, active, dead, succeeded_kept, next_due_ms (-1 = none),
--   paused (0|1), counter name, value, ...}
local sched, active, dead, done, stats, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = now_ms()
local out = {
  now,
  redis.call('ZCARD', sched),
  redis.call('ZCOUNT', sched, '-inf', now),
  redis.call('ZCARD', active),
  redis.call('ZCARD', dead),
  redis.call('ZCARD', done),
  earliest(sched) or -1,
  redis.call('HGET', meta, 'paused') == '1' and 1 or 0,
}
local counters = redis.call('HGETALL', stats)
for i = 1, #counters do out[#out + 1] = counters[i] end
return out
