-- record: the stored values of a task: its record (the `tasks` hash), its business-key and
--   dead-key entries, retention trimming, and its lease value (the `leases` hash).

-- Task record layout (value of the `tasks` hash, field = task id), little-endian:
--   I4 attempt | I2 max_attempts | I4 lease_ms | I2 key field: key length (low 10 bits)
--   + 1024 when a misfire deadline follows the key + 2048 when its schedule's misfire
--   policy is fire_once + 4096 * priority (high 4 bits) | key bytes | [I6 misfire deadline]
--   | [extension] | payload bytes | I6 due_at_ms | I6 created_at_ms
-- Priorities are 0 to 9: the priority bits' value 15 (EXT_MARK) marks an extension block,
-- `I1 priority | I1 flags | I2 length | headers`, which only a task with headers has. Only
-- rec_ok and rec_prio look into it; every other helper and script keeps it with the bytes
-- after the key.
-- Keys are at most 512 bytes, so records from before priorities read as priority 0. The
-- misfire deadline marks a schedule tick's task: if it has not started by then, the tick is
-- missed (rec_misfire). Only the schedule firer writes one.
-- The client builds everything before the 12-byte tail (the "spec"); scripts append the tail,
-- which holds the two times only Redis may decide. 24 bytes of overhead keep a record with a
-- 100-byte payload in a 128-byte allocation. The last error text lives in the `errors` hash
-- (only tasks that failed have one).
-- `max_attempts` or `lease_ms` 0 means "the queue's setting" (meta fields of the same names;
-- else 5 and 30 000, DEFAULT_MAX_ATTEMPTS and DEFAULT_LEASE_MS in task.rs), read where used.
local HDR = '<I4I2I4I2'
local HDR_LEN = 12
local TAIL = '<I6I6'
local TAIL_LEN = 12
-- the key field of the record carries the priority above this
local KLEN_MOD = 4096
-- the key field's bit that says a misfire deadline (6 bytes) follows the key (the key's
-- length is the field modulo this), and the one that says the tick's schedule fires once
-- for a missed span
local MISFIRE_BIT = 1024
local ONCE_BIT = 2048
-- the priority bits' value that marks an extension block; its fixed part's length
local EXT_MARK = 15
local EXT_LEN = 4

-- Where the extension block of a record or spec with key field `kf` starts (1-based).
local function rec_ext_at(kf)
  local at = HDR_LEN + kf % MISFIRE_BIT + 1
  if math.floor(kf / MISFIRE_BIT) % 2 == 1 then at = at + 6 end
  return at
end

-- Whether `rec` is a record these scripts can read. Scripts check before their first write:
-- Redis does not roll a script back when it fails half-way, so a bad record must not be able
-- to stop one in the middle.
local function rec_ok(rec)
  if type(rec) ~= 'string' or #rec < HDR_LEN + TAIL_LEN then return false end
  local kf = struct_unpack('<I2', rec, 11)
  local body = rec_ext_at(kf) - 1
  if kf >= EXT_MARK * KLEN_MOD then
    if body + EXT_LEN + TAIL_LEN > #rec then return false end
    body = body + EXT_LEN + struct_unpack('<I2', rec, body + 3)
  end
  return body + TAIL_LEN <= #rec
end

-- Returns attempt, max_attempts, lease_ms, due_at, created_at, key length.
local function rec_head(rec)
  local attempt, max_attempts, lease_ms, klen = struct_unpack(HDR, rec)
  local due_at, created_at = struct_unpack(TAIL, rec, #rec - TAIL_LEN + 1)
  return attempt, max_attempts, lease_ms, due_at, created_at, klen % MISFIRE_BIT
end

local function rec_key(rec)
  local klen = struct_unpack('<I2', rec, 11) % MISFIRE_BIT
  return string.sub(rec, HDR_LEN + 1, HDR_LEN + klen)
end

-- The misfire deadline of a schedule tick's task that has not started yet (nil when the
-- record has none, or its task started before: a retry is not a misfire), and whether its
-- schedule fires once for a missed span. The bit test reads one byte (the key field's high
-- one: MISFIRE_BIT is its 4), so a claim pays next to nothing for records without one.
local function rec_misfire(rec)
  if string.byte(rec, 12) % 8 < 4 then return nil end
  local attempt, _, _, kf = struct_unpack(HDR, rec)
  if attempt > 0 then return nil end
  return (struct_unpack('<I6', rec, HDR_LEN + kf % MISFIRE_BIT + 1)),
    math.floor(kf / ONCE_BIT) % 2 == 1
end

-- The priority (0..9) of a record or spec.
local function rec_prio(rec)
  local kf = struct_unpack('<I2', rec, 11)
  local p = math.floor(kf / KLEN_MOD)
  if p ~= EXT_MARK then return p end
  return string.byte(rec, rec_ext_at(kf))
end

-- A copy of `rec` with a new attempt count and due time (nil keeps the old one), without a
-- misfire deadline: a task retried, rescheduled or handed back is no longer judged by it.
local function rec_update(rec, attempt, due_at)
  local a, m, l, kf = struct.unpack(HDR, rec)
  local d, c = struct.unpack(TAIL, rec, #rec - TAIL_LEN + 1)
  local body = string.sub(rec, HDR_LEN + 1, #rec - TAIL_LEN)
  if math.floor(kf / MISFIRE_BIT) % 2 == 1 then
    local klen = kf % MISFIRE_BIT
    kf = kf - kf % KLEN_MOD + klen
    body = string.sub(body, 1, klen) .. string.sub(body, klen + 7)
  end
  return struct.pack(HDR, attempt or a, m, l, kf) .. body .. struct.pack(TAIL, due_at or d, c)
end

-- Dead tasks by business key (`dead_keys`: key -> the id of the newest dead task under it,
-- followed by ' ' and how many dead tasks hold the key when more than one), so get by key
-- finds a task that died. Written only when a keyed task dies.
local function dead_key_read(v)
  local id, n = string.match(v, '^(%S+) (%d+)$')
  if id then return id, tonumber(n) end
  return v, 1
end

local function dead_key_add(dead_keys, rec, id)
  local key = rec_key(rec)
  if key == '' then return end
  local old = redis.call('HGET', dead_keys, key)
  local n = 1
  if old then
    local _, m = dead_key_read(old)
    n = m + 1
  end
  if n > 1 then
    redis.call('HSET', dead_keys, key, id .. ' ' .. n)
  else
    redis.call('HSET', dead_keys, key, id)
  end
end

-- The newest task in dead-letter queue `dead` other than `gone` whose key is `key`, or nil.
-- Visits the queue newest first; it is capped (dead_max), so the work stays bounded.
local function newest_dead_with_key(dead, tasks_key, key, gone)
  local total = redis.call('ZCARD', dead)
  for start = 0, total - 1, CHUNK do
    local ids = redis.call('ZREVRANGE', dead, start, start + CHUNK - 1)
    local recs = hmget_chunked(tasks_key, ids)
    for i = 1, #ids do
      if ids[i] ~= gone and recs[i] and rec_ok(recs[i]) and rec_key(recs[i]) == key then
        return ids[i]
      end
    end
  end
  return nil
end

-- Task `id` (record `rec`) leaves the dead-letter queue `dead`: its key's count drops, and
-- when it was the newest dead task under its key the next newest takes its place.
local function dead_key_drop(dead_keys, rec, id, dead, tasks_key)
  if not (rec and rec_ok(rec)) then return end
  local key = rec_key(rec)
  if key == '' then return end
  local v = redis.call('HGET', dead_keys, key)
  if not v then return end
  local newest, n = dead_key_read(v)
  if n <= 1 then
    if newest == id then redis.call('HDEL', dead_keys, key) end
    return
  end
  if newest == id then
    newest = newest_dead_with_key(dead, tasks_key, key, id)
    if not newest then
      redis.call('HDEL', dead_keys, key)
      return
    end
  end
  if n - 1 > 1 then
    redis.call('HSET', dead_keys, key, newest .. ' ' .. (n - 1))
  else
    redis.call('HSET', dead_keys, key, newest)
  end
end

-- Keeps at most `cap` members in a retention sorted set (oldest go first) and drops their
-- records and errors (and, given `dead_keys`, their dead-key entries); removes at most CHUNK
-- per call so the work stays bounded.
local function trim(zkey, tasks_key, errors_key, cap, groups_key, dead_keys)
  local excess = redis.call('ZCARD', zkey) - cap
  if excess <= 0 then return end
  local victims = redis.call('ZRANGE', zkey, 0, math.min(excess, CHUNK) - 1)
  chunked('ZREM', zkey, victims)
  if dead_keys then
    -- out of the queue first, so none of them takes another's place in the dead-key index
    local recs = hmget_chunked(tasks_key, victims)
    for i = 1, #victims do dead_key_drop(dead_keys, recs[i], victims[i], zkey, tasks_key) end
  end
  chunked('HDEL', tasks_key, victims)
  chunked('HDEL', errors_key, victims)
  if groups_key then chunked('HDEL', groups_key, victims) end
end

-- A lease is stored in the `leases` hash as "token deadline flags claimed_at [holder]"; flags:
-- 1 when the task has a business key, + 2 when it has failed before (it has an error text),
-- + 4 when it belongs to a group, so an ack knows what to clean up without reading the
-- record; claimed_at (Redis ms) gives the run time at the ack; holder names the claiming
-- worker, when it said. Returns token, deadline, keyed, failed, grouped, claimed_at (nil
-- when unknown), holder (nil when none).
local function lease_split(lv)
  local token, deadline, flags, at, holder =
    string.match(lv, '^(%S+) (%d+) ?(%d?) ?(%d*) ?(%S*)$')
  if not token then return lv, 0, true, true, true end
  local f = tonumber(flags) or 7
  return token, tonumber(deadline), f % 2 == 1, math.floor(f / 2) % 2 == 1, f >= 4,
    tonumber(at), holder ~= '' and holder or nil
end

-- The lease value `lv` with its deadline moved to `deadline` (an extension), the rest kept.
local function lease_moved(lv, deadline)
  local token, rest = string.match(lv, '^(%S+) %d+ ?(.*)$')
  if not token then return lv end
  -- a value without flags reads as every flag set (lease_split): kept so
  if rest == '' then rest = '7' end
  return token .. ' ' .. int(deadline) .. ' ' .. rest
end
