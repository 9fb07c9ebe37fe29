-- active: the two sets of active tasks, `active` (sorted set, score = lease deadline) and
--   `leases` (hash, id -> lease).
-- Redis keeps a small hash or sorted set as a listpack, a flat list where every insert,
-- lookup and delete scans the whole list. A partition's share of a busy worker's tasks keeps
-- these two sets near the 128-entry limit of that encoding, and every task paid the scan. So
-- while they hold tasks, each also holds `PIN`, an entry too long for a listpack (no task id
-- is longer than 64 bytes), which makes Redis keep them as hash tables. `PIN` sorts after
-- every lease deadline, so range reads by deadline never reach it, and counts leave it out.
-- It goes with the last task, so an idle queue keeps neither set.
local PIN = 'dueq pin: an entry too long for a listpack keeps this set a hash table'
local PIN_SCORE = 9007199254740992 -- 2^53: after any deadline

-- Adds leases: `za` = {deadline, id, ...} to `active`, `la` = {id, lease, ...} to `leases`.
local function active_add(K, za, la)
  -- the pin first, so a new set starts as a hash table
  redis.call('ZADD', K.active, 'NX', PIN_SCORE, PIN)
  redis.call('HSETNX', K.leases, PIN, '')
  chunked('ZADD', K.active, za)
  chunked('HSET', K.leases, la)
end

-- Drops the pins once the tasks are gone (call after removing tasks).
local function active_unpin(K)
  if redis.call('ZCARD', K.active) <= 1 then redis.call('ZREM', K.active, PIN) end
  if redis.call('HLEN', K.leases) <= 1 then redis.call('HDEL', K.leases, PIN) end
end

-- The number of active tasks (by lease deadline).
local function active_count(K)
  local n = redis.call('ZCARD', K.active)
  if n > 0 and redis.call('ZSCORE', K.active, PIN) then n = n - 1 end
  return n
end

-- The numbers of active tasks and of leases, without the pins; drops a pin left alone (an
-- older dueq's ack, running beside this one during an upgrade, does not remove it).
local function active_counts(K)
  local na, nl = redis.call('ZCARD', K.active), redis.call('HLEN', K.leases)
  if na > 0 and redis.call('ZSCORE', K.active, PIN) then
    na = na - 1
    if na == 0 then redis.call('ZREM', K.active, PIN) end
  end
  if nl > 0 and redis.call('HEXISTS', K.leases, PIN) == 1 then
    nl = nl - 1
    if nl == 0 then redis.call('HDEL', K.leases, PIN) end
  end
  return na, nl
end

-- The earliest lease deadline, or nil when no task is active.
local function active_earliest(K)
  local e = earliest(K.active)
  if e and e >= PIN_SCORE then return nil end
  return e
end
