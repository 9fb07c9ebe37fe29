-- lib: helpers shared by every dueq script; prepended to each script when it is registered.
-- KEYS: none of its own (functions take key names from the calling script)
-- ARGV: none of its own
-- Returns: nothing (defines locals only)
--
-- Task record layout (value of the `tasks` hash, field = task id), little-endian:
--   I4 attempt (finished attempts) | I2 max_attempts | I4 lease_ms | I2 key length | key bytes
--   | payload bytes | I6 due_at_ms | I6 created_at_ms
-- The client builds everything before the 12-byte tail (the "spec"); scripts append the tail,
-- which holds the two times only Redis may decide. 24 bytes of overhead keep a record with a
-- 100-byte payload in a 128-byte allocation. The last error text lives in the `errors` hash
-- (only tasks that failed have one).
local HDR = '<I4I2I4I2'
local HDR_LEN = 12
local TAIL = '<I6I6'
local TAIL_LEN = 12
local CHUNK = 1000
local MAX_DUE_MS = 253402300799999
local MAX_ATTEMPT = 4294967295
local HIST_MINUTES = 61

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
  if #fields <= CHUNK then
    if #fields == 0 then return {} end
    return redis.call('HMGET', key, unpack(fields))
  end
  local out, n = {}, 0
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do out[n + j] = part[j] end
    n = n + #part
  end
  return out
end

-- Whether `rec` is a record these scripts can read. Scripts check before their first write:
-- Redis does not roll a script back when it fails half-way, so a bad record must not be able
-- to stop one in the middle.
local function rec_ok(rec)
  if type(rec) ~= 'string' or #rec < HDR_LEN + TAIL_LEN then return false end
  local klen = struct.unpack('<I2', rec, 11)
  return HDR_LEN + klen + TAIL_LEN <= #rec
end

-- Returns attempt, max_attempts, lease_ms, due_at, created_at, key length.
local function rec_head(rec)
  local attempt, max_attempts, lease_ms, klen = struct.unpack(HDR, rec)
  local due_at, created_at = struct.unpack(TAIL, rec, #rec - TAIL_LEN + 1)
  return attempt, max_attempts, lease_ms, due_at, created_at, klen
end

local function rec_key(rec)
  local klen = struct.unpack('<I2', rec, 11)
  return string.sub(rec, HDR_LEN + 1, HDR_LEN + klen)
end

-- A copy of `rec` with a new attempt count and due time (nil keeps the old one).
local function rec_update(rec, attempt, due_at)
  local a, m, l, d, c, klen = rec_head(rec)
  return struct.pack(HDR, attempt or a, m, l, klen)
    .. string.sub(rec, HDR_LEN + 1, #rec - TAIL_LEN) .. struct.pack(TAIL, due_at or d, c)
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
  if not rec_ok(rec) then return end
  local key = rec_key(rec)
  if key ~= '' and redis.call('HGET', keys_key, key) == id then
    redis.call('HDEL', keys_key, key)
  end
end

-- Keeps at most `cap` members in a retention sorted set (oldest go first) and drops their
-- records and errors; removes at most CHUNK per call so the work stays bounded.
local function trim(zkey, tasks_key, errors_key, cap)
  local excess = redis.call('ZCARD', zkey) - cap
  if excess <= 0 then return end
  local victims = redis.call('ZRANGE', zkey, 0, math.min(excess, CHUNK) - 1)
  chunked('ZREM', zkey, victims)
  chunked('HDEL', tasks_key, victims)
  chunked('HDEL', errors_key, victims)
end

-- Per-minute history (the `hist` hash, read by history.lua): adds `n` to counter `what` of
-- the current minute, field "<minute>:<what>" (minute = ms / 60 000). Counters: c claimed,
-- l lateness sum (ms, claim time minus due time), x lateness max (ms), s succeeded,
-- r retried, d dead. Returns the new value.
local function hist_add(hist, now, what, n)
  return redis.call('HINCRBY', hist, int(math.floor(now / 60000)) .. ':' .. what, n)
end

-- Drops history fields of minutes older than HIST_MINUTES. Called once per minute (by the
-- first claim of a minute), so the hash stays near 6 fields x 61 minutes.
local function hist_trim(hist, now)
  local oldest = math.floor(now / 60000) - HIST_MINUTES
  local fields = redis.call('HKEYS', hist)
  local old, n = {}, 0
  for i = 1, #fields do
    local m = tonumber(string.match(fields[i], '^(%d+):'))
    if not m or m < oldest then
      n = n + 1
      old[n] = fields[i]
    end
  end
  if n > 0 then chunked('HDEL', hist, old) end
end

-- Moves a task whose record is unreadable to the dead-letter queue, record untouched.
-- `K` names the keys dead, errors, stats, hist.
local function quarantine(K, id, now)
  redis.call('ZADD', K.dead, now, id)
  redis.call('HSET', K.errors, id, 'unreadable task record')
  redis.call('HINCRBY', K.stats, 'dead_total', 1)
  hist_add(K.hist, now, 'd', 1)
end

-- One attempt of an active task failed (nack or expired lease). `K` names the keys:
-- sched, tasks, keys, dead, stats, meta, errors. The lease is already removed.
-- Returns 1, due_at when the task was rescheduled, 2, 0 when it went to the dead-letter queue.
local function fail_attempt(K, channel, id, rec, now, retry_ms, permanent, err)
  if not rec_ok(rec) then
    quarantine(K, id, now)
    return 2, 0
  end
  local attempt, max_attempts = rec_head(rec)
  attempt = math.min(attempt + 1, MAX_ATTEMPT)
  redis.call('HINCRBY', K.stats, 'failed_total', 1)
  redis.call('HSET', K.errors, id, err)
  if permanent or attempt >= max_attempts then
    redis.call('HSET', K.tasks, id, rec_update(rec, attempt, nil))
    redis.call('ZADD', K.dead, now, id)
    release_key(K.keys, rec, id)
    redis.call('HINCRBY', K.stats, 'dead_total', 1)
    hist_add(K.hist, now, 'd', 1)
    trim(K.dead, K.tasks, K.errors, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'))
    return 2, 0
  end
  local due = now + retry_ms
  if due > MAX_DUE_MS then due = MAX_DUE_MS end
  local before = earliest(K.sched)
  redis.call('HSET', K.tasks, id, rec_update(rec, attempt, due))
  redis.call('ZADD', K.sched, due, id)
  redis.call('HINCRBY', K.stats, 'retried_total', 1)
  hist_add(K.hist, now, 'r', 1)
  wake(channel, due, before)
  return 1, due
end

-- A lease is stored in the `leases` hash as "token deadline flags"; flags: 1 when the task has
-- a business key, + 2 when it has failed before (it has an error text), so an ack knows what
-- to clean up without reading the record. Returns token, deadline, keyed, failed.
local function lease_split(lv)
  local token, deadline, flags = string.match(lv, '^(%S+) (%d+) ?(%d?)$')
  if not token then return lv, 0, true, true end
  local f = tonumber(flags) or 3
  return token, tonumber(deadline), f % 2 == 1, f >= 2
end

-- Resolves ARGV "id"/"key" addressing to a task id (or nil).
local function resolve(keys_key, by, value)
  if by == 'key' then return redis.call('HGET', keys_key, value) or nil end
  return value
end

