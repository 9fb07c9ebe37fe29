-- stats: counts and timings of one queue, without scanning (O(log n)).
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV: none
-- Returns: {now_ms, scheduled, due, active, dead, succeeded_kept, next_due_ms (-1 = none),
--   paused (0|1), groups waiting (ready or parked), then name, value pairs: the counters of
--   the stats hash, and the meta fields thr_rate, thr_concurrency (since when a queue limit
--   holds due work back), the limits and alert thresholds, as "meta:<field>"}
local K = queue_keys()
local active, dead, done, stats, meta, gdue = K.active, K.dead, K.done, K.stats, K.meta, K.gdue
local now = now_ms()
local pl, pn = prios_of(redis.call('HGET', meta, 'prio'))
local next_due = earliest_plain(K, pl, pn)
local gnext = earliest(gdue)
if gnext and (not next_due or gnext < next_due) then next_due = gnext end
local scheduled = redis.call('ZCARD', gdue)
local due = redis.call('ZCOUNT', gdue, '-inf', now)
for i = 1, pn do
  scheduled = scheduled + redis.call('ZCARD', K.s[pl[i]])
  due = due + redis.call('ZCOUNT', K.s[pl[i]], '-inf', now)
end
local out = {
  now,
  scheduled,
  due,
  active_count(K),
  redis.call('ZCARD', dead),
  redis.call('ZCARD', done),
  next_due or -1,
  redis.call('HGET', meta, 'paused') == '1' and 1 or 0,
  redis.call('ZCARD', K.gready) + redis.call('HLEN', K.gparked),
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
