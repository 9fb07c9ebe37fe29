-- purge: drops up to `max` tasks of one state, so that a call's work stays bounded; the
--   caller calls again while tasks are left. Scheduled tasks (every priority and group) are
--   dropped as a cancel drops them (counted in cancelled_total; a schedule's ticks fired
--   ahead among them are gone too); dead and kept succeeded ones are deleted.
-- KEYS[1] sched  KEYS[2] dead  KEYS[3] tasks  KEYS[4] keys  KEYS[5] errors
-- KEYS[6..14] group keys, KEYS[15..24] option keys (see lib/)  KEYS[25] meta
-- KEYS[26] dead_keys  KEYS[27] done  KEYS[28] stats
-- ARGV[1] state ('scheduled' | 'dead' | 'succeeded'), ARGV[2] max (1..1000)
-- Returns: {now_ms, dropped, left (tasks of that state still there)}
local D = {dead = KEYS[2], tasks = KEYS[3], keys = KEYS[4], errors = KEYS[5],
  G = group_keys(6), O = option_keys(15), dead_keys = KEYS[26], stats = KEYS[28]}
D.G.meta = KEYS[25]
local now = now_ms()
local state, max = ARGV[1], tonumber(ARGV[2])
local dropped, left = 0, 0
if state == 'scheduled' then
  local pl, pn = prios_of(redis.call('HGET', KEYS[25], 'prio'))
  -- ungrouped tasks by priority, then grouped ones
  local sets = {}
  for i = 1, pn do sets[i] = D.O.s[pl[i]] end
  sets[pn + 1] = D.G.gdue
  for i = 1, pn + 1 do
    if dropped < max then
      local ids = redis.call('ZRANGE', sets[i], 0, max - dropped - 1)
      local recs = hmget_chunked(D.tasks, ids)
      for j = 1, #ids do
        if unschedule(D, D.G, D.O, ids[j], recs[j]) then dropped = dropped + 1 end
      end
    end
    left = left + redis.call('ZCARD', sets[i])
  end
elseif state == 'dead' or state == 'succeeded' then
  local set = state == 'dead' and D.dead or KEYS[27]
  local ids = redis.call('ZRANGE', set, 0, max - 1)
  local recs = hmget_chunked(D.tasks, ids)
  for j = 1, #ids do
    if state == 'dead' then
      dead_delete_one(D, ids[j], recs[j])
    else
      redis.call('ZREM', set, ids[j])
      redis.call('HDEL', D.tasks, ids[j])
      redis.call('HDEL', D.errors, ids[j])
      redis.call('HDEL', D.G.groups, ids[j])
    end
  end
  dropped = #ids
  left = redis.call('ZCARD', set)
else
  return redis.error_reply('purge: unknown state ' .. state)
end
return {now, dropped, left}
