-- lib: helpers shared by every dueq operation; the head of the function library (scripts.rs),
--   run once when the library loads.
-- KEYS: none of its own (functions take key names from the calling operation)
-- ARGV: none of its own
-- Returns: nothing (defines locals only)
--
-- Task record layout (value of the `tasks` hash, field = task id), little-endian:
--   I4 attempt | I2 max_attempts | I4 lease_ms | I2 key field: key length (low 10 bits)
--   + 1024 when a misfire deadline follows the key + 2048 when its schedule's misfire
--   policy is fire_once + 4096 * priority (high 4 bits) | key bytes | [I6 misfire deadline]
--   | payload bytes | I6 due_at_ms | I6 created_at_ms
-- Keys are at most 512 bytes, so records from before priorities read as priority 0. The
-- misfire deadline marks a schedule tick's task: if it has not started by then, the tick is
-- missed (rec_misfire). Only the schedule firer writes one.
-- The client builds everything before the 12-byte tail (the "spec"); scripts append the tail,
-- which holds the two times only Redis may decide. 24 bytes of overhead keep a record with a
-- 100-byte payload in a 128-byte allocation. The last error text lives in the `errors` hash
-- (only tasks that failed have one).
-- `max_attempts` or `lease_ms` 0 means "the queue's setting" (meta fields of the same names;
-- else 5 and 30 000, DEFAULT_MAX_ATTEMPTS and DEFAULT_LEASE_MS in task.rs), read where used.
-- Each operation's function starts by setting KEYS and ARGV (its call's keys and arguments:
-- these helpers and the operations read them as in a script) and struct_unpack: the `struct`
-- library is not there while a library loads. Per-task helpers read records through that
-- local: a global is a table lookup per use in Lua 5.1.
local KEYS, ARGV, struct_unpack
local HDR = '<I4I2I4I2'
local HDR_LEN = 12
local TAIL = '<I6I6'
local TAIL_LEN = 12
local CHUNK = 1000
local MAX_DUE_MS = 253402300799999
local MAX_ATTEMPT = 4294967295
local HIST_MINUTES = 61
-- the key field of the record carries the priority above this
local KLEN_MOD = 4096
-- the key field's bit that says a misfire deadline (6 bytes) follows the key (the key's
-- length is the field modulo this), and the one that says the tick's schedule fires once
-- for a missed span
local MISFIRE_BIT = 1024
local ONCE_BIT = 2048
-- most scheduled tasks one call expires by the `expiry` index (claim, recover)
local EXPIRE_BATCH = 100

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
  local kf = struct_unpack('<I2', rec, 11)
  local body = HDR_LEN + kf % MISFIRE_BIT
  if math.floor(kf / MISFIRE_BIT) % 2 == 1 then body = body + 6 end
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
  return math.floor(struct_unpack('<I2', rec, 11) / KLEN_MOD)
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

-- Dead tasks by business key (`dead_keys`: key -> id of the newest dead task under it), so
-- get by key finds a task that died. Written only when a keyed task dies.
local function dead_key_add(dead_keys, rec, id)
  local key = rec_key(rec)
  if key ~= '' then redis.call('HSET', dead_keys, key, id) end
end

-- Drops the dead-key entry of task `id` (record `rec`) if it points at it.
local function dead_key_drop(dead_keys, rec, id)
  if not (rec and rec_ok(rec)) then return end
  local key = rec_key(rec)
  if key ~= '' and redis.call('HGET', dead_keys, key) == id then
    redis.call('HDEL', dead_keys, key)
  end
end

-- Keeps at most `cap` members in a retention sorted set (oldest go first) and drops their
-- records and errors (and, given `dead_keys`, their dead-key entries); removes at most CHUNK
-- per call so the work stays bounded.
local function trim(zkey, tasks_key, errors_key, cap, groups_key, dead_keys)
  local excess = redis.call('ZCARD', zkey) - cap
  if excess <= 0 then return end
  local victims = redis.call('ZRANGE', zkey, 0, math.min(excess, CHUNK) - 1)
  if dead_keys then
    local recs = hmget_chunked(tasks_key, victims)
    for i = 1, #victims do dead_key_drop(dead_keys, recs[i], victims[i]) end
  end
  chunked('ZREM', zkey, victims)
  chunked('HDEL', tasks_key, victims)
  chunked('HDEL', errors_key, victims)
  if groups_key then chunked('HDEL', groups_key, victims) end
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

-- The priorities in use by meta field `prio` (nil = none above 0): 0 first, ascending, and
-- their count.
local function prios_of(mask)
  local l, n = {0}, 1
  mask = tonumber(mask or '0') or 0
  if mask > 0 then
    for p = 1, 9 do
      if math.floor(mask / 2 ^ p) % 2 == 1 then
        n = n + 1
        l[n] = p
      end
    end
  end
  return l, n
end

-- Groups. A task with a group is not in `sched`; it sits in three places keyed by its group:
-- `gsched` (sorted set, every score 0, ordered by member = group prefix, big-endian due time,
-- id, so one range read finds a group's due tasks in due order; the prefix carries the
-- task's priority, see gpprefix, so each priority of a group is its own range), `gdue` (score = due time, for
-- stats and lookups) and `groups` (id -> group, kept until the task is gone). A group with
-- scheduled tasks has a marker in `gready` (member = group, score = when the group may next be
-- served: its first due time, or the claim time once it was served, which sends it behind the
-- groups still waiting (round-robin), or the instant its rate limit opens). A group at its
-- concurrency limit leaves `gready` and waits in `gparked` (group -> since ms) until one of its
-- tasks stops being active. `gactive` counts active tasks per group. `G` names the keys
-- gsched, gdue, groups, gready, gactive, gparked, rate, rate_n, rate_idle; scripts pass them
-- as nine consecutive KEYS (group_keys).
local function group_keys(at)
  return {gsched = KEYS[at], gdue = KEYS[at + 1], groups = KEYS[at + 2], gready = KEYS[at + 3],
    gactive = KEYS[at + 4], gparked = KEYS[at + 5], rate = KEYS[at + 6], rate_n = KEYS[at + 7],
    rate_idle = KEYS[at + 8]}
end

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
-- read the field sets G.pl, G.pn; else it is read here once per call (from G.meta), when a
-- group's head is first needed.
local function gprios(G)
  if not G.pl then
    if G.meta then
      G.pl, G.pn = prios_of(redis.call('HGET', G.meta, 'gprio'))
    else
      G.pl, G.pn = {0}, 1
    end
  end
  return G.pl, G.pn
end

-- The first scheduled task of the range with prefix `p`: due time (nil when it has none).
local function ghead_at(G, p)
  local r = redis.call('ZRANGEBYLEX', G.gsched, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0, 1)
  if r[1] then return (struct.unpack('>I6', r[1], #p + 1)) end
  return nil
end

-- The earliest due time of group `g`'s scheduled tasks, over its priorities (nil: none).
local function ghead(G, g)
  local pl, pn = gprios(G)
  local best = nil
  for i = 1, pn do
    local h = ghead_at(G, gpprefix(g, pl[i]))
    if h and (not best or h < best) then best = h end
  end
  return best
end

-- Earliest time anything is due: ungrouped tasks and ready groups (nil when nothing waits).
local function earliest_due(sched, G)
  local a, b = earliest(sched), earliest(G.gready)
  if a and b then return math.min(a, b) end
  return a or b
end

-- Makes group `g` ready by `due` (its earliest new task), unless it is parked at its
-- concurrency limit. A ready group keeps its place in the rotation, and a group held back by
-- its rate limit stays held; only a marker waiting for a future first task moves sooner.
local function gready_by(G, g, due, now)
  if redis.call('HEXISTS', G.gparked, g) == 1 then return end
  local s = tonumber(redis.call('ZSCORE', G.gready, g) or '-1')
  if s < 0 then
    redis.call('ZADD', G.gready, due, g)
  elseif s > now and due < s then
    -- held (it has due work) or waiting for a future first task (it has none)?
    local head = ghead(G, g)
    if not head or head > now then redis.call('ZADD', G.gready, due, g) end
  end
end

-- Schedules task `id` of group `g` (priority `p`) at `due` and makes the group ready by then.
local function gschedule(G, g, id, due, now, p)
  -- the marker first: it looks at the group's tasks as they were before this one
  gready_by(G, g, due, now)
  redis.call('ZADD', G.gsched, 0, gpprefix(g, p) .. be6(due) .. id)
  redis.call('ZADD', G.gdue, due, id)
  redis.call('HSET', G.groups, id, g)
end

-- Schedules many new tasks of one group: `b` holds `sched` (gsched members, each with score
-- 0 before it), `due` (gdue score, id pairs), `ids` (groups id, group pairs) and `first` (the
-- earliest due time); the marker is looked at once.
local function gschedule_batch(G, g, b, now)
  gready_by(G, g, b.first, now)
  chunked('ZADD', G.gsched, b.sched)
  chunked('ZADD', G.gdue, b.due)
  chunked('HSET', G.groups, b.ids)
end

-- Takes scheduled task `id` of group `g` (due at `due`, priority `p`) out of the group index.
local function gunschedule(G, g, id, due, p)
  redis.call('ZREM', G.gsched, gpprefix(g, p) .. be6(due) .. id)
  redis.call('ZREM', G.gdue, id)
end

-- `n` (default 1) active tasks of group `g` stopped being active (ack, nack, release,
-- expired lease): their slots are free, so a parked group is ready again. Returns true when
-- it made a group ready.
local function gfinish(G, g, now, stats, n)
  if redis.call('HINCRBY', G.gactive, g, -(n or 1)) <= 0 then redis.call('HDEL', G.gactive, g) end
  local since = redis.call('HGET', G.gparked, g)
  if not since then return false end
  redis.call('HDEL', G.gparked, g)
  redis.call('HINCRBY', stats, 'throttled_ms_group_concurrency', math.max(now - tonumber(since), 0))
  local head = ghead(G, g)
  if not head then return false end
  redis.call('ZADD', G.gready, math.max(head, now), g)
  return true
end

-- Whether the queue is at its concurrency limit, so that a task leaving `active` frees a slot
-- a throttled claimer waits for.
-- `limit`: the queue's `concurrency` setting when the caller has read it already.
local function at_concurrency(meta, active, limit)
  local c = limit or tonumber(redis.call('HGET', meta, 'concurrency') or '0') or 0
  return c > 0 and redis.call('ZCARD', active) >= c
end

-- Sliding-window rate limits on the Redis clock. Each limit owner ('' for the queue, else a
-- group) has a log in `rate` (sorted set, every score 0, member = owner prefix, big-endian
-- claim time, running total of tasks taken), one entry per claim that took tasks, and
-- `rate_n` (owner -> "total floor [held]", floor = the running total of the newest entry that
-- left the window; held = since when a group has been held back by its full window), so the
-- count in the window is total - floor, found in O(log n). `rate_idle`
-- (owner prefix -> time of its newest entry) lets claims drop logs nobody adds to.
-- Returns the room left now, and when it is 0 the instant the next slot opens; `st` is
-- passed on to rate_take.
local function rate_room(G, owner, max, per_ms, now)
  local p = gprefix(owner)
  local st = {p = p, owner = owner, total = 0, floor = 0}
  local v = redis.call('HGET', G.rate_n, owner)
  if not v then return max, nil, st end
  local total, floor, held = string.match(v, '^(%d+) (%d+) ?(%d*)$')
  st.total, st.floor, st.held = tonumber(total) or 0, tonumber(floor) or 0, tonumber(held)
  -- entries at or before now - per_ms are out of the window
  local hi = '(' .. p .. be6(math.max(now - per_ms + 1, 0))
  local last = redis.call('ZREVRANGEBYLEX', G.rate, hi, '[' .. p, 'LIMIT', 0, 1)
  if last[1] then
    st.floor = struct.unpack('>I6', last[1], #p + 7)
    redis.call('ZREMRANGEBYLEX', G.rate, '[' .. p, hi)
    redis.call('HSET', G.rate_n, owner, int(st.total) .. ' ' .. int(st.floor)
      .. (st.held and (' ' .. int(st.held)) or ''))
  end
  local room = max - (st.total - st.floor)
  if room > 0 then return room, nil, st end
  local first = redis.call('ZRANGEBYLEX', G.rate, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0, 1)
  if not first[1] then return 1, nil, st end
  return 0, struct.unpack('>I6', first[1], #p + 1) + per_ms, st
end

-- Marks the owner of `st` held back by its full window since now (unless it already is).
local function rate_hold(G, st, now)
  if st.held then return end
  st.held = now
  redis.call('HSET', G.rate_n, st.owner, int(st.total) .. ' ' .. int(st.floor) .. ' ' .. int(now))
end

-- Logs `n` tasks taken now against the limit whose state rate_room returned (and ends a
-- hold).
local function rate_take(G, st, n, now)
  st.total = st.total + n
  redis.call('ZADD', G.rate, 0, st.p .. be6(now) .. be6(st.total))
  redis.call('HSET', G.rate_n, st.owner, int(st.total) .. ' ' .. int(st.floor))
  redis.call('ZADD', G.rate_idle, now, st.p)
end

-- Drops up to `count` (default 10) logs whose newest entry is at or before `before` (their
-- window is empty).
local function rate_forget(G, before, count)
  local old = redis.call('ZRANGEBYSCORE', G.rate_idle, '-inf', before, 'LIMIT', 0, count or 10)
  for i = 1, #old do
    local p = old[i]
    redis.call('ZREMRANGEBYLEX', G.rate, '[' .. p, '(' .. p .. '\255')
    redis.call('HDEL', G.rate_n, string.sub(p, 3))
    redis.call('ZREM', G.rate_idle, p)
  end
end

-- One attempt of an active task failed (nack or expired lease). `K` names the keys:
-- sched, tasks, keys, dead, dead_keys, stats, meta, errors, `K.G` the group keys and `K.O` the option
-- keys (defined below; looked up at call time). The lease is
-- already removed. Sets `K.woke` when the task's group became ready again.
-- Returns 1, due_at when the task was rescheduled, 2, 0 when it went to the dead-letter queue.
local function fail_attempt(K, channel, id, rec, now, retry_ms, permanent, err)
  local g = redis.call('HGET', K.G.groups, id)
  if g and gfinish(K.G, g, now, K.stats) then K.woke = true end
  if not rec_ok(rec) then
    quarantine(K, id, now)
    return 2, 0
  end
  local attempt, max_attempts = rec_head(rec)
  if max_attempts == 0 then max_attempts = tonumber(redis.call('HGET', K.meta, 'max_attempts') or '5') or 5 end
  attempt = math.min(attempt + 1, MAX_ATTEMPT)
  redis.call('HINCRBY', K.stats, 'failed_total', 1)
  redis.call('HSET', K.errors, id, err)
  if permanent or attempt >= max_attempts then
    -- a dead task keeps its group (in `groups`), so a retry puts it back in it
    redis.call('HSET', K.tasks, id, rec_update(rec, attempt, nil))
    redis.call('ZADD', K.dead, now, id)
    release_key(K.keys, rec, id)
    dead_key_add(K.dead_keys, rec, id)
    redis.call('HINCRBY', K.stats, 'dead_total', 1)
    hist_add(K.hist, now, 'd', 1)
    trim(K.dead, K.tasks, K.errors, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'), K.G.groups,
      K.dead_keys)
    return 2, 0
  end
  local due = now + retry_ms
  if due > MAX_DUE_MS then due = MAX_DUE_MS end
  local before = earliest_due(K.sched, K.G)
  redis.call('HSET', K.tasks, id, rec_update(rec, attempt, due))
  if g then
    gschedule(K.G, g, id, due, now, rec_prio(rec))
  else
    -- back into the set of its priority (its bit in meta `prio` was set when it was enqueued)
    redis.call('ZADD', K.O.s[rec_prio(rec)], due, id)
  end
  redis.call('HINCRBY', K.stats, 'retried_total', 1)
  hist_add(K.hist, now, 'r', 1)
  wake(channel, due, before)
  return 1, due
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

-- Timings counted where work is handed out and finished (DESIGN 4.4), in the `stats` hash:
-- lateness (claim time minus due time) at each claim, run time (ack or nack time minus claim
-- time) at each finish. Each is a histogram: field "<name>:<i>" counts the values in bucket
-- i (value <= bound i, above bound i - 1; the last bound is +Inf), "<name>_sum_ms" their
-- sum. Bounds in ms, LATENESS_BOUNDS_MS and RUN_TIME_BOUNDS_MS in task.rs; each list ends in
-- infinity (1 / 0), the +Inf bucket, so a scan always stops inside it.
local LATE_BOUNDS = {0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
  60000, 300000, 900000, 3600000, 14400000, 86400000, 1 / 0}
local RUN_BOUNDS = {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
  300000, 900000, 3600000, 1 / 0}

-- The bucket of `v` in `bounds`, looked for from bucket `near` (the previous value's: the
-- tasks of one call come in due order, so their values are close): a step or two, not a
-- scan from the first bound.
local function bucket(bounds, v, near)
  local i = near or 1
  while v > bounds[i] do i = i + 1 end
  while i > 1 and v <= bounds[i - 1] do i = i - 1 end
  return i
end

-- Adds the counts `counts` (bucket -> n) and `sum` to histogram `name` of `stats`.
local function timings_add(stats, name, counts, sum)
  for i, n in pairs(counts) do redis.call('HINCRBY', stats, name .. ':' .. i, n) end
  redis.call('HINCRBY', stats, name .. '_sum_ms', int(sum))
end

-- Resolves ARGV "id"/"key" addressing to a task id (or nil).
local function resolve(keys_key, by, value)
  if by == 'key' then return redis.call('HGET', keys_key, value) or nil end
  return value
end


-- Task options. Ungrouped scheduled tasks sit in one sorted set per priority: `sched` (always
-- KEYS[1]) for priority 0, then one key per priority 1..9. The meta field `prio` is a bitmask
-- (2^p) of the priorities above 0 ever used, so a claim reads only the sets in use, and a
-- queue that never used a priority reads `sched` alone, as before. Bits are set by the
-- enqueue that first uses a priority and never cleared (an empty set costs one read), so
-- every script that puts a task back into its set finds the bit already set. `expiry`
-- (sorted set id -> expires_at_ms) holds the scheduled tasks with an expiry that have not
-- started; the meta field `exp` is 1 once any task of the queue had one. `O` names the keys:
-- O.s[0..9] (the sets by priority) and O.expiry; scripts pass the ten keys after the group
-- keys (option_keys).
local function option_keys(at)
  local s = {[0] = KEYS[1]}
  for p = 1, 9 do s[p] = KEYS[at + p - 1] end
  return {s = s, expiry = KEYS[at + 9]}
end

-- Marks the priorities of table `used` (p -> true) as in use (meta field `field`, default
-- `prio`; `gprio` for grouped tasks).
local function prios_mark(meta, used, field)
  field = field or 'prio'
  local add = 0
  for p = 1, 9 do if used[p] then add = add + 2 ^ p end end
  if add == 0 then return end
  local mask = tonumber(redis.call('HGET', meta, field) or '0') or 0
  local new = mask
  for p = 1, 9 do
    if math.floor(add / 2 ^ p) % 2 == 1 and math.floor(mask / 2 ^ p) % 2 == 0 then new = new + 2 ^ p end
  end
  if new ~= mask then redis.call('HSET', meta, field, int(new)) end
end

-- Earliest due time over the ungrouped sets of priorities `pl` (count `pn`), or nil.
local function earliest_plain(O, pl, pn)
  local best = nil
  for i = 1, pn do
    local e = earliest(O.s[pl[i]])
    if e and (not best or e < best) then best = e end
  end
  return best
end

-- Ends scheduled task `id` (record `rec`, already out of its scheduled index) as expired:
-- dropped with its record and key, or kept in the dead-letter queue with the error
-- 'expired' when `to_dead`. `K` names tasks, keys, dead, dead_keys, errors, stats, meta, G, O.
local function expire_task(K, id, rec, now, to_dead)
  redis.call('ZREM', K.O.expiry, id)
  release_key(K.keys, rec, id)
  redis.call('HINCRBY', K.stats, 'expired_total', 1)
  if to_dead then
    -- a dead task keeps its group (in `groups`), so a retry puts it back in it
    redis.call('ZADD', K.dead, now, id)
    redis.call('HSET', K.errors, id, 'expired')
    dead_key_add(K.dead_keys, rec, id)
    trim(K.dead, K.tasks, K.errors, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'), K.G.groups,
      K.dead_keys)
  else
    redis.call('HDEL', K.tasks, id)
    redis.call('HDEL', K.errors, id)
    redis.call('HDEL', K.G.groups, id)
  end
end

-- Expires up to EXPIRE_BATCH scheduled tasks whose expiry has passed, found by the `expiry`
-- index (never by a scan), taking each out of its scheduled set or group. An entry whose task
-- is not scheduled (a broken invariant, or a record deleted by hand) is only dropped.
-- Returns how many tasks expired and whether the batch was full (more may be waiting).
local function expire_due(K, now, to_dead)
  local ids = redis.call('ZRANGEBYSCORE', K.O.expiry, '-inf', now, 'LIMIT', 0, EXPIRE_BATCH)
  local n = #ids
  if n == 0 then return 0, false end
  local recs = hmget_chunked(K.tasks, ids)
  local groups = hmget_chunked(K.G.groups, ids)
  local gone = 0
  for i = 1, n do
    local id, rec, g = ids[i], recs[i], groups[i]
    local out_of_index = false
    if rec and rec_ok(rec) then
      if g then
        local d = redis.call('ZSCORE', K.G.gdue, id)
        if d then
          gunschedule(K.G, g, id, tonumber(d), rec_prio(rec))
          if not ghead(K.G, g) then redis.call('ZREM', K.G.gready, g) end
          out_of_index = true
        end
      else
        out_of_index = redis.call('ZREM', K.O.s[rec_prio(rec)], id) == 1
      end
    end
    if out_of_index then
      expire_task(K, id, rec, now, to_dead)
      gone = gone + 1
    else
      redis.call('ZREM', K.O.expiry, id)
    end
  end
  return gone, n == EXPIRE_BATCH
end

-- Removes task `id` (record `rec`) if it is scheduled, waiting in its priority's set or in
-- its group, as a cancel: record, error, key and expiry entry gone, counted in
-- `cancelled_total`. `T` names tasks, keys, errors, stats. Whether it was removed.
local function unschedule(T, G, O, id, rec)
  local p = rec and rec_ok(rec) and rec_prio(rec) or 0
  if redis.call('ZREM', O.s[p], id) == 0 then
    local gdue = redis.call('ZSCORE', G.gdue, id)
    if not gdue then return false end
    local g = redis.call('HGET', G.groups, id)
    if g then
      gunschedule(G, g, id, tonumber(gdue), p)
      if not ghead(G, g) then redis.call('ZREM', G.gready, g) end
    else
      redis.call('ZREM', G.gdue, id)
    end
    redis.call('HDEL', G.groups, id)
  end
  redis.call('ZREM', O.expiry, id)
  redis.call('HDEL', T.tasks, id)
  redis.call('HDEL', T.errors, id)
  if rec then release_key(T.keys, rec, id) end
  redis.call('HINCRBY', T.stats, 'cancelled_total', 1)
  return true
end

-- A schedule's state text: "next last skipped paused fired fingerprint/prev" (next -1 when
-- none, last -1 before the first fire; prev, the tick fired before `last`, rides on the
-- fingerprint after a '/' so that scripts from before it still read the state; absent, it
-- reads as -1). Returns the seven fields as strings, or nil when unreadable.
local function sched_state(st)
  local next_at, last, skipped, paused, fired, fp, prev =
    string.match(st, '^(%-?%d+) (%-?%d+) (%d+) (%d) (%d+) ([^%s/]*)/?(%-?%d*)$')
  if prev == '' then prev = '-1' end
  return next_at, last, skipped, paused, fired, fp, prev
end

-- The state text of the seven fields (see sched_state).
local function sched_state_text(next_at, last, skipped, paused, fired, fp, prev)
  return next_at .. ' ' .. last .. ' ' .. skipped .. ' ' .. paused .. ' ' .. fired .. ' '
    .. fp .. '/' .. prev
end

-- A schedule's newest fired ticks (`schedule_fired`: name -> "t1 t2 ..." ascending): every
-- tick fired ahead (at most `ahead_max`, see schedule_fire.lua), whose times a change needs to
-- take their tasks back, and the one fired before them. Read with the state's `last` and
-- `prev` (strings) merged in, and without entries after `last` (ticks a version that kept no
-- list took back), so that a schedule stored, fired or changed by such a version reads
-- right. Returns the ticks as strings and as numbers, ascending.
local function sched_ticks(text, last, prev)
  local S, N, n = {}, {}, 0
  local p, l = tonumber(prev), tonumber(last)
  if text then
    for t in string.gmatch(text, '%d+') do
      local v = tonumber(t)
      if l and v > l then break end
      n = n + 1
      S[n], N[n] = t, v
    end
  end
  if p and p >= 0 and (n == 0 or p > N[n]) then n = n + 1 S[n], N[n] = prev, p end
  if l and l >= 0 and (n == 0 or l > N[n]) then n = n + 1 S[n], N[n] = last, l end
  return S, N
end

-- The `schedule_fired` text of ticks `S` (ascending): the newest `keep`.
local function sched_ticks_text(S, keep)
  return table.concat(S, ' ', math.max(1, #S - keep + 1), #S)
end

-- The score of a schedule in `schedule_next`: when a firer should act on it, `lead` ms before
-- its next tick (so the tick's task waits, due at the tick, when it comes), but not before
-- only `refill` of its fired ticks (numbers `N`, ascending) still wait: a step fires up to
-- `ahead_max` ticks ahead, and the next step comes once `refill` of them are left, so each
-- step fires several ticks of a frequent schedule at once. That moment is taken halfway
-- between the two fired ticks around it, not at a tick, when the tasks of every schedule
-- sharing the tick fall due. `next_at` is a state string; the score comes back as one.
local function sched_act_at(next_at, N, lead, refill)
  local act = tonumber(next_at) - lead
  local gate = N[#N - refill]
  if gate and refill > 0 then gate = gate + math.floor((N[#N - refill + 1] - gate) / 2) end
  if gate and act <= gate then return int(gate) end
  if lead == 0 then return next_at end
  return int(act)
end

-- Undoes the ticks fired ahead (after `now`) of schedule `name` before a change (replace,
-- pause, delete): each tick's task is taken back if it still waits for its due time
-- (unschedule, counted as cancelled), and each such tick counts as not fired whatever became
-- of its task (cancelled by hand, say), so the schedule's next tick is never at or before
-- its last. `S`, `N`: its fired ticks (sched_ticks), shortened here to those at or before
-- `now`. Returns the earliest tick undone (a string, nil when none), and the state's `last`,
-- `prev` and `fired` after it.
local function sched_withdraw(T, G, O, name, S, N, fired, now)
  local n = #N
  local k, first = n, nil
  while k > 0 and N[k] > now do
    local id = redis.call('HGET', T.keys, 'schedule:' .. name .. ':' .. S[k])
    if id then unschedule(T, G, O, id, redis.call('HGET', T.tasks, id)) end
    first = S[k]
    S[k], N[k] = nil, nil
    k = k - 1
  end
  if first then fired = int(math.max(tonumber(fired) - (n - k), 0)) end
  return first, S[k] or '-1', S[k - 1] or '-1', fired
end

-- Dead-letter queue. `D` names the keys dead, tasks, keys, errors, dead_keys, `D.G` the group
-- keys and `D.O` the option keys (dead_retry.lua's layout).

-- Retries dead task `id` (record `rec`, readable): scheduled at `due` with a fresh attempt
-- count, back in its group or priority set, its key live again. Returns 'retried', or
-- 'conflict' (nothing changed) when its business key is live on another task.
local function dead_retry_one(D, id, rec, due, now)
  local key = rec_key(rec)
  local holder = key ~= '' and redis.call('HGET', D.keys, key)
  if holder and holder ~= id then return 'conflict' end
  redis.call('ZREM', D.dead, id)
  dead_key_drop(D.dead_keys, rec, id)
  redis.call('HSET', D.tasks, id, rec_update(rec, 0, due))
  -- attempts count afresh, so the old error goes too (a claim only looks for errors of
  -- tasks with attempts behind them)
  redis.call('HDEL', D.errors, id)
  local g = redis.call('HGET', D.G.groups, id)
  if g then
    gschedule(D.G, g, id, due, now, rec_prio(rec))
  else
    redis.call('ZADD', D.O.s[rec_prio(rec)], due, id)
  end
  if key ~= '' then redis.call('HSET', D.keys, key, id) end
  return 'retried'
end

-- Deletes dead task `id` (record `rec`, or false) for good.
local function dead_delete_one(D, id, rec)
  redis.call('ZREM', D.dead, id)
  dead_key_drop(D.dead_keys, rec, id)
  redis.call('HDEL', D.tasks, id)
  redis.call('HDEL', D.errors, id)
  redis.call('HDEL', D.G.groups, id)
end
