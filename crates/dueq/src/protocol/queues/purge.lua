-- purge: drops up to `max` tasks of one state, so that a call's work stays bounded; the
--   caller calls again while tasks are left. Scheduled tasks (every priority and group) are
--   dropped as a cancel drops them (counted in cancelled_total; a schedule's ticks fired
--   ahead among them are gone too); dead and kept succeeded ones are deleted.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] state ('scheduled' | 'dead' | 'succeeded'), ARGV[2] max (1..1000)
-- Returns: {now_ms, dropped, left (tasks of that state still there)}
local K = queue_keys()
local now = now_ms()
local state, max = ARGV[1], tonumber(ARGV[2])
local dropped, left = 0, 0
if state == 'scheduled' then
  local pl, pn = prios_of(redis.call('HGET', K.meta, 'prio'))
  -- ungrouped tasks by priority, then grouped ones
  local sets = {}
  for i = 1, pn do sets[i] = K.s[pl[i]] end
  sets[pn + 1] = K.gdue
  for i = 1, pn + 1 do
    if dropped < max then
      local ids = redis.call('ZRANGE', sets[i], 0, max - dropped - 1)
      local recs = hmget_chunked(K.tasks, ids)
      for j = 1, #ids do
        if unschedule(K, ids[j], recs[j]) then dropped = dropped + 1 end
      end
    end
    left = left + redis.call('ZCARD', sets[i])
  end
elseif state == 'dead' or state == 'succeeded' then
  local set = state == 'dead' and K.dead or K.done
  local ids = redis.call('ZRANGE', set, 0, max - 1)
  local recs = hmget_chunked(K.tasks, ids)
  for j = 1, #ids do
    if state == 'dead' then
      dead_delete_one(K, ids[j], recs[j])
    else
      redis.call('ZREM', set, ids[j])
      redis.call('HDEL', K.tasks, ids[j])
      redis.call('HDEL', K.errors, ids[j])
      redis.call('HDEL', K.groups, ids[j])
    end
  end
  dropped = #ids
  left = redis.call('ZCARD', set)
else
  return redis.error_reply('purge: unknown state ' .. state)
end
return {now, dropped, left}
