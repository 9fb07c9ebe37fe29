-- stats: counts and timings of one queue, without scanning (O(log n)).
-- KEYS[1] sched  KEYS[2] active  KEYS[3] dead  KEYS[4] done  KEYS[5] stats  KEYS[6] meta
-- KEYS[7] gdue  KEYS[8] gready  KEYS[9] gparked  KEYS[10..19] option keys (see lib/)
-- ARGV: none
-- Returns: {now_ms, scheduled, due, active, dead, succeeded_kept, next_due_ms (-1 = none),
--   paused (0|1), groups waiting (ready or parked), then name, value pairs: the counters of
--   the stats hash, and the meta fields thr_rate, thr_concurrency (since when a queue limit
--   holds due work back), the limits and alert thresholds, as "meta:<field>"}
local sched, active, dead, done, stats, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local gdue = KEYS[7]
local O = option_keys(10)
local now = now_ms()
local pl, pn = prios_of(redis.call('HGET', meta, 'prio'))
local next_due = earliest_plain(O, pl, pn)
local gnext = earliest(gdue)
if gnext and (not next_due or gnext < next_due) then next_due = gnext end
local scheduled = redis.call('ZCARD', gdue)
local due = redis.call('ZCOUNT', gdue, '-inf', now)
for i = 1, pn do
  scheduled = scheduled + redis.call('ZCARD', O.s[pl[i]])
  due = due + redis.call('ZCOUNT', O.s[pl[i]], '-inf', now)
end
local out = {
  now,
  scheduled,
  due,
  redis.call('ZCARD', active),
  redis.call('ZCARD', dead),
  redis.call('ZCARD', done),
  next_due or -1,
  redis.call('HGET', meta, 'paused') == '1' and 1 or 0,
  redis.call('ZCARD', KEYS[8]) + redis.call('HLEN', KEYS[9]),
}
local counters = redis.call('HGETALL', stats)
for i = 1, #counters do out[#out + 1] = counters[i] end
local fields = {'thr_rate', 'thr_concurrency', 'concurrency', 'rate_max', 'rate_per_ms',
  'group_concurrency', 'alert_due_age_ms', 'alert_due_count'}
local m = redis.call('HMGET', meta, unpack(fields))
for i = 1, #fields do
  if m[i] then
    out[#out + 1] = 'meta:' .. fields[i]
    out[#out + 1] = m[i]
  end
end
return out
