-- lib: helpers shared by every dueq script; prepended to each script when it is registered.
-- KEYS: none of its own (functions take key names from the calling script)
-- ARGV: none of its own
-- Returns: nothing (defines locals only)
--
-- Task record layout (value of the `tasks` hash, field = task id), little-endian:
--   B version (1) | I4 attempt (finished attempts) | I4 max_attempts | I4 lease_ms
--   | d due_at_ms | d created_at_ms | I2 key length | I4 last_error length
--   | key bytes | last_error bytes | payload bytes
-- Doubles hold integer milliseconds exactly (below 2^53).
local HDR = '<BI4I4I4ddI2I4'
local HDR_LEN = 35
local CHUNK = 1000
local MAX_DUE_MS = 253402300799999
-- The attempt counter is stored in 32 bits: counting saturates here instead of wrapping to 0.
local MAX_ATTEMPT = 4294967295

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(n)
  return string.format('%d', n)
end

-- Runs a variadic command over `args` in slices, since unpack() breaks at a few thousand values.
local function chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end

-- HMGET in slices; returns one value (or false) per field, in order.
local function hmget_chunked(key, fields)
  local out = {}
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

local function rec_pack(attempt, max_attempts, lease_ms, due_at, created_at, key, err, payload)
  return struct.pack(HDR, 1, attempt, max_attempts, lease_ms, due_at, created_at, #key, #err)
    .. key .. err .. payload
end

-- Returns attempt, max_attempts, lease_ms, due_at, created_at, key length, error length.
local function rec_head(rec)
  local _, attempt, max_attempts, lease_ms, due_at, created_at, klen, elen = struct.unpack(HDR, rec)
  return attempt, max_attempts, lease_ms, due_at, created_at, klen, elen
end

local function rec_key(rec)
  local klen = struct.unpack('<I2', rec, 30)
  return string.sub(rec, HDR_LEN + 1, HDR_LEN + klen)
end

-- A copy of `rec` with a new attempt count, due time and (unless nil) last error.
local function rec_update(rec, attempt, due_at, err)
  local a, m, l, d, c, klen, elen = rec_head(rec)
  local key = string.sub(rec, HDR_LEN + 1, HDR_LEN + klen)
  if err == nil then err = string.sub(rec, HDR_LEN + klen + 1, HDR_LEN + klen + elen) end
  return struct.pack(HDR, 1, attempt or a, m, l, due_at or d, c, klen, #err)
    .. key .. err .. string.sub(rec, HDR_LEN + klen + elen + 1)
end

-- Earliest score of a sorted set, or nil when it is empty.
local function earliest(zkey)
  local r = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) end
  return nil
end

-- Tells idle workers (subscribed to `channel`) that a task became due earlier than they think.
local function wake(channel, due_at, before)
  if before == nil or due_at < before then
    redis.call('PUBLISH', channel, int(due_at))
  end
end

-- Drops the business-key index entry of task `id` if it still points at it.
local function release_key(keys_key, rec, id)
  local key = rec_key(rec)
  if key ~= '' and redis.call('HGET', keys_key, key) == id then
    redis.call('HDEL', keys_key, key)
  end
end

-- Keeps at most `cap` members in a retention sorted set (oldest go first) and drops their
-- records; removes at most CHUNK per call so the work stays bounded.
local function trim(zkey, tasks_key, cap)
  local excess = redis.call('ZCARD', zkey) - cap
  if excess <= 0 then return end
  local victims = redis.call('ZRANGE', zkey, 0, math.min(excess, CHUNK) - 1)
  chunked('ZREM', zkey, victims)
  chunked('HDEL', tasks_key, victims)
end

-- One attempt of an active task failed (nack or expired lease). `K` names the keys:
-- sched, tasks, keys, dead, stats, meta. The lease is already removed.
-- Returns 1, due_at when the task was rescheduled, 2, 0 when it went to the dead-letter queue.
local function fail_attempt(K, channel, id, rec, now, retry_ms, permanent, err)
  local attempt, max_attempts = rec_head(rec)
  attempt = math.min(attempt + 1, MAX_ATTEMPT)
  redis.call('HINCRBY', K.stats, 'failed_total', 1)
  if permanent or attempt >= max_attempts then
    redis.call('HSET', K.tasks, id, rec_update(rec, attempt, nil, err))
    redis.call('ZADD', K.dead, now, id)
    release_key(K.keys, rec, id)
    redis.call('HINCRBY', K.stats, 'dead_total', 1)
    trim(K.dead, K.tasks, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'))
    return 2, 0
  end
  local due = now + retry_ms
  if due > MAX_DUE_MS then due = MAX_DUE_MS end
  local before = earliest(K.sched)
  redis.call('HSET', K.tasks, id, rec_update(rec, attempt, due, err))
  redis.call('ZADD', K.sched, due, id)
  redis.call('HINCRBY', K.stats, 'retried_total', 1)
  wake(channel, due, before)
  return 1, due
end

-- Token and lease deadline stored in the `leases` hash as "token deadline".
local function lease_split(lv)
  local sp = string.find(lv, ' ', 1, true)
  if not sp then return lv, 0 end
  return string.sub(lv, 1, sp - 1), tonumber(string.sub(lv, sp + 1))
end

-- Resolves ARGV "id"/"key" addressing to a task id (or nil).
local function resolve(keys_key, by, value)
  if by == 'key' then return redis.call('HGET', keys_key, value) or nil end
  return value
end

