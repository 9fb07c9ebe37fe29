-- groups: scheduled and active tasks of groups.
--   A task with a group is not in `sched`; it sits in three places keyed by its group: `gsched`
--   (sorted set, every score 0, ordered by member = group prefix, big-endian due time, id, so
--   one range read finds a group's due tasks in due order; the prefix carries the task's
--   priority, see gpprefix, so each priority of a group is its own range), `gdue` (score = due
--   time, for stats and lookups) and `groups` (id -> group, kept until the task is gone). A
--   group with scheduled tasks has a marker in `gready` (member = group, score = when the group
--   may next be served: its first due time, or the claim time once it was served, which sends
--   it behind the groups still waiting (round-robin), or the instant its rate limit opens). A
--   group at its concurrency limit leaves `gready` and waits in `gparked` (group -> since ms)
--   until one of its tasks stops being active. `gactive` counts active tasks per group.
--   Helpers take `K`, the queue's keys (keys.lua).

local function be6(n) return struct.pack('>I6', n) end

-- The member prefix of group (or rate-limit owner) `g`: its length, then its bytes, so no
-- group's members fall inside another group's range.
local function gprefix(g) return struct.pack('>I2', #g) .. g end

-- The member prefix of group `g`'s tasks of priority `p`: the length field carries the
-- priority above its 12 bits (groups are at most 256 bytes), so priority 0 is gprefix and
-- each priority of a group is a range of its own.
local function gpprefix(g, p)
  if not p or p == 0 then return gprefix(g) end
  return struct.pack('>I2', #g + p * KLEN_MOD) .. g
end

-- The priorities grouped tasks use (meta `gprio`, a bitmask like `prio`): a script that
-- read the field sets K.pl, K.pn; else it is read here once per call, when a group's head is
-- first needed.
local function gprios(K)
  if not K.pl then K.pl, K.pn = prios_of(redis.call('HGET', K.meta, 'gprio')) end
  return K.pl, K.pn
end

-- The first scheduled task of the range with prefix `p`: due time (nil when it has none).
local function ghead_at(K, p)
  local r = redis.call('ZRANGEBYLEX', K.gsched, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0, 1)
  if r[1] then return (struct.unpack('>I6', r[1], #p + 1)) end
  return nil
end

-- The earliest due time of group `g`'s scheduled tasks, over its priorities (nil: none).
local function ghead(K, g)
  local pl, pn = gprios(K)
  local best = nil
  for i = 1, pn do
    local h = ghead_at(K, gpprefix(g, pl[i]))
    if h and (not best or h < best) then best = h end
  end
  return best
end

-- Earliest time anything is due: ungrouped tasks and ready groups (nil when nothing waits).
local function earliest_due(K)
  local a, b = earliest(K.sched), earliest(K.gready)
  if a and b then return math.min(a, b) end
  return a or b
end

-- Makes group `g` ready by `due` (its earliest new task), unless it is parked at its
-- concurrency limit. A ready group keeps its place in the rotation, and a group held back by
-- its rate limit stays held; only a marker waiting for a future first task moves sooner.
local function gready_by(K, g, due, now)
  if redis.call('HEXISTS', K.gparked, g) == 1 then return end
  local s = tonumber(redis.call('ZSCORE', K.gready, g) or '-1')
  if s < 0 then
    redis.call('ZADD', K.gready, due, g)
  elseif s > now and due < s then
    -- held (it has due work) or waiting for a future first task (it has none)?
    local head = ghead(K, g)
    if not head or head > now then redis.call('ZADD', K.gready, due, g) end
  end
end

-- Schedules task `id` of group `g` (priority `p`) at `due` and makes the group ready by then.
local function gschedule(K, g, id, due, now, p)
  -- the marker first: it looks at the group's tasks as they were before this one
  gready_by(K, g, due, now)
  redis.call('ZADD', K.gsched, 0, gpprefix(g, p) .. be6(due) .. id)
  redis.call('ZADD', K.gdue, due, id)
  redis.call('HSET', K.groups, id, g)
end

-- Schedules many new tasks of one group: `b` holds `sched` (gsched members, each with score
-- 0 before it), `due` (gdue score, id pairs), `ids` (groups id, group pairs) and `first` (the
-- earliest due time); the marker is looked at once.
local function gschedule_batch(K, g, b, now)
  gready_by(K, g, b.first, now)
  chunked('ZADD', K.gsched, b.sched)
  chunked('ZADD', K.gdue, b.due)
  chunked('HSET', K.groups, b.ids)
end

-- Takes scheduled task `id` of group `g` (due at `due`, priority `p`) out of the group index.
local function gunschedule(K, g, id, due, p)
  redis.call('ZREM', K.gsched, gpprefix(g, p) .. be6(due) .. id)
  redis.call('ZREM', K.gdue, id)
end

-- `n` (default 1) active tasks of group `g` stopped being active (ack, nack, release,
-- expired lease): their slots are free, so a parked group is ready again. Returns true when
-- it made a group ready.
local function gfinish(K, g, now, n)
  if redis.call('HINCRBY', K.gactive, g, -(n or 1)) <= 0 then redis.call('HDEL', K.gactive, g) end
  local since = redis.call('HGET', K.gparked, g)
  if not since then return false end
  redis.call('HDEL', K.gparked, g)
  redis.call('HINCRBY', K.stats, 'throttled_ms_group_concurrency', math.max(now - tonumber(since), 0))
  local head = ghead(K, g)
  if not head then return false end
  redis.call('ZADD', K.gready, math.max(head, now), g)
  return true
end
