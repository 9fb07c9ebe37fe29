-- claim: hands out up to `max` due tasks under a fresh lease each, within the queue's limits.
-- KEYS: queue_keys, Span::Claims (keys.rs). `schedule_state`: a missed tick counts in its
--   schedule's skipped_total; `dead_keys`: an expired task kept in the dead-letter queue stays
--   findable by key.
-- ARGV[1] max (0..1000; 0 only reports timing)  ARGV[2] lease_ms override (0 = each task's own)
-- ARGV[3] claim id ('' = untracked): remember what this call hands out, so that a caller that
--   never got the reply can ask for it again
-- ARGV[4] claim id to forget ('' = none): an earlier call whose reply did arrive
-- ARGV[5] holder ('' = unnamed): the claiming worker's id, kept in each lease (lease_split)
-- ARGV[6] r, ARGV[7..6+r] claim ids whose replies were lost: their tasks still leased under
--   the same token are handed out again first (new deadline, same token)
-- Returns: {now_ms, paused (0|1), next_due_ms (-1 = none), next_lease_deadline_ms (-1 = none),
--   orphans (1 when a lease has no deadline entry), settings version, throttle ('' | 'rate' |
--   'concurrency': a queue limit held due work back), rate slot opens at ms (-1 = none),
--   the queue's max_attempts (for records that leave it 0), held (1 when due work waits for a
--   concurrency slot, the queue's or a parked group's: a task that ends frees one),
--   n tasks, m missed ticks, then per task: id, lease_token, due_at_ms, lease_deadline_ms,
--   record, last error ('' = none); then for each task with a group: its index (1-based),
--   its group; then the schedule name of each missed tick counted as skipped}
-- Order: ungrouped due tasks by priority (0 first), then due time (FIFO among equal due
-- times); a group is one contender
-- placed by when it became due or was last served, so groups are served round-robin and a
-- group's own tasks come by priority (0 first), then due order. Limits: the queue's concurrency (active tasks) and
-- rate (sliding window of claimed tasks), then each group's.
-- Expiry: when the queue ever had a task with an expiry (meta `exp`), each call first expires
-- up to 100 tasks by the `expiry` index, and a due task whose expiry has passed is expired
-- instead of handed out; a task handed out leaves the index (a started task never expires).
-- Missed ticks (DESIGN 2.16): a schedule tick's task that has not started by its misfire
-- deadline (its fire time + misfire_grace_ms under `skip`, the next tick's under
-- `fire_once`, so only the newest missed tick of a span runs) is not handed out: it is
-- dropped, counted as cancelled, in its schedule's skipped_total under `skip`, and taken
-- off its fired_total.
-- One lease token serves every task of a call: a token only has to differ between two claims
-- of the same task, and those are always different calls.
local K = queue_keys()
-- locals for what the per-task loops use: a table field is a lookup per use in Lua 5.1
local active, leases, tasks, meta, claims, errors = K.active, K.leases, K.tasks, K.meta,
  K.claims, K.errors
local sstate = K.schedule_state
local max = tonumber(ARGV[1])
local override = tonumber(ARGV[2])
local claim_id, forget = ARGV[3], ARGV[4]
local now = now_ms()
-- what follows the flags in each lease value: the claim time and the holder
local lease_tail = ' ' .. int(now) .. (ARGV[5] ~= '' and ' ' .. ARGV[5] or '')
local cfg = redis.call('HMGET', meta, 'paused', 'concurrency', 'rate_max', 'rate_per_ms',
  'group_concurrency', 'group_rate_max', 'group_rate_per_ms', 'settings_v', 'thr_rate',
  'thr_concurrency', 'max_attempts', 'lease_ms', 'prio', 'exp', 'on_expire', 'gprio')
local paused = cfg[1] == '1'
local conc = tonumber(cfg[2] or '0') or 0
local rmax, rper = tonumber(cfg[3] or '0') or 0, tonumber(cfg[4] or '0') or 0
local gconc = tonumber(cfg[5] or '0') or 0
local grmax, grper = tonumber(cfg[6] or '0') or 0, tonumber(cfg[7] or '0') or 0
local default_lease = tonumber(cfg[12] or '30000') or 30000
-- the priorities in use (a queue that never used one reads `sched` alone)
local pl, pn = prios_of(cfg[13])
local exp_on, to_dead = cfg[14] ~= false, cfg[15] == 'dead'
-- the priorities grouped tasks use (each a range of a group's own in `gsched`)
K.pl, K.pn = prios_of(cfg[16])
local out = {now, paused and 1 or 0, -1, -1, 0, cfg[8] or '0', '', -1, cfg[11] or '5', 0, 0, 0}
-- (index, group) of the grouped tasks handed out, appended after the tasks, and the
-- schedule names of missed ticks, appended after those
local grouped_out, ngo = {}, 0
local missed, nmissed = {}, 0
-- explicit lengths: `#t` is a search in Lua 5.1, too slow in a per-task loop
local za, la, log = {}, {}, {}
local nz, no = 0, #out
-- made[token][lease_ms * 8 + flags] = {deadline, deadline string, lease value}
local made = {}

local function hand_out(id, token, rec, due, group)
  local attempt, _, lease_ms, klen = struct_unpack(HDR, rec)
  klen = klen % MISFIRE_BIT
  if override > 0 then lease_ms = override elseif lease_ms == 0 then lease_ms = default_lease end
  local flags = (klen > 0 and 1 or 0) + (attempt > 0 and 2 or 0) + (group ~= '' and 4 or 0)
  local by_token = made[token]
  if not by_token then
    by_token = {}
    made[token] = by_token
  end
  local m = by_token[lease_ms * 8 + flags]
  if not m then
    local deadline = now + lease_ms
    local ds = int(deadline)
    m = {deadline, ds, token .. ' ' .. ds .. ' ' .. flags .. lease_tail}
    by_token[lease_ms * 8 + flags] = m
  end
  za[nz + 1] = m[2]; za[nz + 2] = id
  la[nz + 1] = id; la[nz + 2] = m[3]
  log[nz + 1] = id; log[nz + 2] = token
  nz = nz + 2
  out[no + 1] = id
  out[no + 2] = token
  out[no + 3] = due
  out[no + 4] = m[1]
  out[no + 5] = rec
  out[no + 6] = attempt > 0 and (redis.call('HGET', errors, id) or '') or ''
  no = no + 6
  if group ~= '' then
    grouped_out[ngo + 1] = nz / 2
    grouped_out[ngo + 2] = group
    ngo = ngo + 2
  end
end

if forget ~= '' then redis.call('HDEL', claims, forget) end
for i = 1, tonumber(ARGV[6]) do
  local lost = ARGV[6 + i]
  local entry = redis.call('HGET', claims, lost)
  if entry then
    redis.call('HDEL', claims, lost)
    -- entry: "<created ms> id token id token ..."
    local words = {}
    for w in string.gmatch(entry, '%S+') do words[#words + 1] = w end
    for j = 2, #words - 1, 2 do
      local id, token = words[j], words[j + 1]
      local lv = redis.call('HGET', leases, id)
      local rec = lv and lease_split(lv) == token and redis.call('HGET', tasks, id)
      if rec and rec_ok(rec) then
        local _, _, _, due = rec_head(rec)
        local _, _, _, _, grouped = lease_split(lv)
        hand_out(id, token, rec, due, grouped and (redis.call('HGET', K.groups, id) or '') or '')
      end
    end
  end
end

local token = nil
local fresh, late_sum, late_max = 0, 0, 0
-- lateness histogram counts of this call (bucket -> tasks), the last task's bucket, and how
-- many tasks in a row fell in it (not yet in late_n)
local late_n, late_b, late_run = {}, 1, 0

-- Drops task `id` (record `rec`, taken off its index) of a missed tick: counted as cancelled,
-- in its schedule's skipped_total unless the schedule fires once for a missed span (`once`:
-- the newest tick of the span runs for all of them), and its fired_total one less.
local function drop_missed(id, rec, group, once)
  release_key(K, rec, id)
  redis.call('HDEL', tasks, id)
  if group ~= '' then redis.call('HDEL', K.groups, id) end
  redis.call('HINCRBY', K.stats, 'cancelled_total', 1)
  local name = string.match(rec_key(rec), '^schedule:(.+):%d+$')
  if not name then return end
  local st = redis.call('HGET', sstate, name)
  local next_at, last, skipped, paused, fired, fp, prev
  if st then next_at, last, skipped, paused, fired, fp, prev = sched_state(st) end
  if next_at then
    if not once then skipped = int(tonumber(skipped) + 1) end
    redis.call('HSET', sstate, name, sched_state_text(next_at, last, skipped, paused,
      int(math.max(tonumber(fired) - 1, 0)), fp, prev))
  end
  if not once then
    nmissed = nmissed + 1
    missed[nmissed] = name
  end
end

-- Hands out the tasks `ids` (due times `dues`, `n` of them) taken off their index; `gs`
-- holds each task's group (nil: none of them has one). Returns how many were handed out,
-- and with `gs` how many of each group.
local function hand_out_all(ids, dues, n, gs)
  if n == 0 then return 0, {} end
  if not token then token = int(redis.call('HINCRBY', meta, 'seq', 1)) end
  local recs = hmget_chunked(tasks, ids)
  -- expiry times of these tasks (n <= 1000, the claim's cap, so one call)
  local exps = exp_on and redis.call('ZMSCORE', K.expiry, unpack(ids, 1, n))
  local started, ns = {}, 0
  local given, per = 0, {}
  for j = 1, n do
    local group = gs and gs[j] or ''
    local e = exps and exps[j] and tonumber(exps[j])
    -- a missing record (hash entry deleted by hand) leaves nothing to run; an unreadable
    -- one goes to the dead-letter queue instead of stopping the queue
    local rec = recs[j]
    local ok = rec and rec_ok(rec)
    local md, once
    if ok then md, once = rec_misfire(rec) end
    if e and e <= now and ok then
      expire_task(K, ids[j], rec, now, to_dead)
    elseif md and md < now then
      if e then redis.call('ZREM', K.expiry, ids[j]) end
      drop_missed(ids[j], rec, group, once)
    elseif ok then
      if e then
        ns = ns + 1
        started[ns] = ids[j]
      end
      local d = dues[j]
      hand_out(ids[j], token, recs[j], d, group)
      given = given + 1
      if gs then per[group] = (per[group] or 0) + 1 end
      local late = now - d
      late_sum = late_sum + late
      if late > late_max then late_max = late end
      -- tasks mostly come in due order: count a run of one bucket, and write it when it ends
      if late > LATE_BOUNDS[late_b] or (late_b > 1 and late <= LATE_BOUNDS[late_b - 1]) then
        if late_run > 0 then late_n[late_b] = (late_n[late_b] or 0) + late_run end
        late_b, late_run = bucket(LATE_BOUNDS, late, late_b), 0
      end
      late_run = late_run + 1
    else
      if recs[j] then quarantine(K, ids[j], now) end
      if group ~= '' then redis.call('HDEL', K.groups, ids[j]) end
    end
  end
  if ns > 0 then chunked('ZREM', K.expiry, started) end
  fresh = fresh + given
  return given, per
end

-- Up to `room` ungrouped due tasks in claim order: priority by priority (0 first), each
-- set's due head in due order. Returns {ids, dues, sets (priority of each), n}.
local function read_plain(room)
  local ids, dues, sets, n = {}, {}, {}, 0
  for i = 1, pn do
    if n >= room then break end
    local p = pl[i]
    local r = redis.call('ZRANGEBYSCORE', K.s[p], '-inf', now, 'WITHSCORES', 'LIMIT', 0, room - n)
    for j = 1, #r, 2 do
      n = n + 1
      ids[n] = r[j]
      dues[n] = tonumber(r[j + 1])
      sets[n] = p
    end
  end
  return {ids = ids, dues = dues, sets = sets, n = n}
end

-- Takes the first `n` tasks read by read_plain: within each priority's set they are exactly
-- its lowest-ranked members (score, then member order), so they go by rank from the head:
-- O(log n + k) instead of k descents of a large skip list.
local function take_plain(plain, n)
  if n == 0 then return 0 end
  local ids, dues = plain.ids, plain.dues
  if n < plain.n then
    ids, dues = {}, {}
    for i = 1, n do
      ids[i] = plain.ids[i]
      dues[i] = plain.dues[i]
    end
  end
  local i = 1
  while i <= n do
    local p, j = plain.sets[i], i
    while j < n and plain.sets[j + 1] == p do j = j + 1 end
    redis.call('ZREMRANGEBYRANK', K.s[p], 0, j - i)
    i = j + 1
  end
  return (hand_out_all(ids, dues, n, nil))
end

-- One round of take_groups: serves the groups `ready` up to `share` due tasks each (`room`
-- in all) within their limits, then puts each back in the rotation (at the claim time, so
-- behind the groups still waiting), parks it at its concurrency limit, holds it until its
-- rate limit opens, or drops its marker when it has nothing scheduled. The reads are per
-- group; the writes the groups share (due index, records, markers) are one call per round.
-- Returns the tasks handed out.
local function serve_groups(ready, share, room)
  local nr = #ready
  local running = gconc > 0 and redis.call('HMGET', K.gactive, unpack(ready, 1, nr))
  -- what each group takes: ids, due times and groups of the tasks, and per group served
  -- (in `served`) its running count, rate limit state and earliest task not taken
  local ids, dues, gs, n = {}, {}, {}, 0
  local served, ns = {}, 0
  for i = 1, nr do
    if n >= room then break end
    local g = ready[i]
    local q = math.min(share, room - n)
    local run = running and tonumber(running[i] or '0') or 0
    local limit = nil
    if gconc > 0 then q = math.min(q, gconc - run) end
    if q <= 0 then
      -- at its limit: served for nothing, so it is parked while due work waits (below)
      ns = ns + 1
      served[ns] = {g, run, nil, ghead(K, g)}
    elseif grmax > 0 and grper > 0 then
      local r, opens
      r, opens, limit = rate_room(K, g, grmax, grper, now)
      if r <= 0 then
        redis.call('ZADD', K.gready, opens, g)
        rate_hold(K, limit, now)
      end
      q = math.min(q, r)
    end
    if q > 0 then
      -- per priority in use (0 first), one read gives the due tasks to take (at most q in
      -- all) and that priority's next task after them; `head` is the earliest not taken
      local head, took = nil, 0
      for k = 1, K.pn do
        local p = gpprefix(g, K.pl[k])
        local want = q - took
        local r = redis.call('ZRANGEBYLEX', K.gsched, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0,
          want + 1)
        local last = 0
        for j = 1, #r do
          local d = struct.unpack('>I6', r[j], #p + 1)
          if j > want or d > now then
            if not head or d < head then head = d end
            break
          end
          last = j
          took = took + 1
          n = n + 1
          dues[n] = d
          ids[n] = string.sub(r[j], #p + 7)
          gs[n] = g
        end
        if last > 0 then redis.call('ZREMRANGEBYLEX', K.gsched, '[' .. r[1], '[' .. r[last]) end
      end
      ns = ns + 1
      served[ns] = {g, run, limit, head}
    end
  end
  if n > 0 then chunked('ZREM', K.gdue, ids) end
  local given, per = hand_out_all(ids, dues, n, gs)
  local again, na, parked, np, gone, ng = {}, 0, {}, 0, {}, 0
  for i = 1, ns do
    local g, run, limit, head = served[i][1], served[i][2], served[i][3], served[i][4]
    local got = per[g] or 0
    if got > 0 then
      redis.call('HINCRBY', K.gactive, g, got)
      if limit then
        -- the time the group was held back, counted now that it is served (summed over
        -- groups)
        if limit.held then
          redis.call('HINCRBY', K.stats, 'throttled_ms_group_rate', math.max(now - limit.held, 0))
          limit.held = nil
        end
        rate_take(K, limit, got, now)
      end
    end
    if not head then
      ng = ng + 1
      gone[ng] = g
    elseif gconc > 0 and run + got >= gconc and head <= now then
      ng = ng + 1
      gone[ng] = g
      parked[np + 1] = g; parked[np + 2] = int(now)
      np = np + 2
    else
      again[na + 1] = math.max(head, now); again[na + 2] = g
      na = na + 2
    end
  end
  if ng > 0 then chunked('ZREM', K.gready, gone) end
  if np > 0 then chunked('HSET', K.gparked, parked) end
  if na > 0 then chunked('ZADD', K.gready, again) end
  return given
end

-- Serves ready groups, an equal share of `room` each per round, round after round while
-- room is left: a group given its share stays ready (at the claim time) and comes again;
-- one held back by a limit or out of due work leaves the range, so the next round reads
-- other groups. Under a group concurrency limit a round reads one group per `gconc` slots,
-- so each visit can fill the group's free slots: a visit costs a few Redis commands however
-- many tasks it takes, and a group served moves behind the others all the same.
-- At most room + 100 group visits per claim, so the work stays bounded.
local function take_groups(room)
  local taken, visits = 0, 0
  local quantum = math.max(gconc, 1)
  while room > 0 and visits < room + 100 do
    local ready = redis.call('ZRANGEBYSCORE', K.gready, '-inf', now, 'LIMIT', 0,
      math.ceil(room / quantum))
    if #ready == 0 then break end
    local n = serve_groups(ready, math.max(1, math.floor(room / #ready)), room)
    room = room - n
    taken = taken + n
    visits = visits + #ready
  end
  return taken
end

-- Takes up to `room` due tasks. Ungrouped tasks (in due order) are one contender and every
-- ready group another: the ungrouped ones get one share of the room, the groups the rest,
-- and what the groups leave goes back to the ungrouped ones; so neither a flooding group
-- nor a backlog of ungrouped tasks holds a group back. With less room than contenders, the
-- ungrouped tasks take their turn like a group: placed by when they were last served (meta
-- `plain_at`) or became due, against the first ready group's place (`g0`).
local function take_due(room, g0)
  local plain = read_plain(room)
  local np = plain.n
  if not g0 or g0 > now then return take_plain(plain, np) end
  local nplain = 0
  if np > 0 then
    local ng = redis.call('ZCOUNT', K.gready, '-inf', now)
    nplain = math.min(np, math.floor(room / (ng + 1)))
    if nplain == 0 then
      local at = tonumber(redis.call('HGET', meta, 'plain_at') or '0') or 0
      -- (ties go to the groups: served in the same millisecond, the ungrouped tasks come
      -- after them, as a group comes after the groups whose names sort before its own)
      if math.max(at, plain.dues[1]) < g0 then nplain = 1 end
    end
  end
  local taken = take_groups(room - nplain)
  local left = room - nplain - taken
  if left > 0 then nplain = math.min(np, nplain + left) end
  local given = take_plain(plain, nplain)
  if nplain > 0 then redis.call('HSET', meta, 'plain_at', int(now)) end
  return taken + given
end

-- Times due work spent held back by a queue limit: `thr_<limit>` in meta is when it started.
local function throttle_clock(limit, since, on)
  if on and not since then
    redis.call('HSET', meta, 'thr_' .. limit, int(now))
  elseif not on and since then
    redis.call('HINCRBY', K.stats, 'throttled_ms_' .. limit, math.max(now - tonumber(since), 0))
    redis.call('HDEL', meta, 'thr_' .. limit)
  end
end

local room = max - nz / 2
if max > 0 and exp_on then expire_due(K, now, to_dead) end
-- the earliest due time decides whether to look further (an idle poll stops here)
local first_plain, first_group = earliest_plain(K, pl, pn), earliest(K.gready)
local first = first_plain
if first_group and (not first or first_group < first) then first = first_group end
local due_now = not paused and room > 0 and first ~= nil and first <= now
local by_rate, by_conc = false, false
if due_now then
  if conc > 0 then
    local free = conc - active_count(K)
    if free <= 0 then by_conc = true end
    room = math.min(room, free)
  end
  local limit = nil
  if rmax > 0 and rper > 0 and room > 0 then
    local r, opens
    r, opens, limit = rate_room(K, '', rmax, rper, now)
    if r <= 0 then
      by_rate = true
      out[8] = opens
    end
    room = math.min(room, r)
  end
  if room > 0 then
    local n = take_due(room, first_group)
    if limit and n > 0 then rate_take(K, limit, n, now) end
  end
  first = earliest_plain(K, pl, pn)
  local fg = earliest(K.gready)
  if fg and (not first or fg < first) then first = fg end
end
-- logs of owners idle for a window go, also while the queue is idle
if max > 0 and (rmax > 0 or grmax > 0) then rate_forget(K, now - math.max(rper, grper)) end
if by_conc then out[7] = 'concurrency' elseif by_rate then out[7] = 'rate' end
if by_conc or (gconc > 0 and redis.call('HLEN', K.gparked) > 0) then out[10] = 1 end
if max > 0 then
  if conc > 0 or cfg[10] then throttle_clock('concurrency', cfg[10], by_conc) end
  if rmax > 0 or cfg[9] then throttle_clock('rate', cfg[9], by_rate) end
end

if fresh > 0 then
  if late_run > 0 then late_n[late_b] = (late_n[late_b] or 0) + late_run end
  redis.call('HINCRBY', K.stats, 'claimed_total', fresh)
  timings_add(K.stats, 'lateness', late_n, late_sum)
  -- the first claim of a minute also drops minutes older than the hour kept
  if hist_add(K.hist, now, 'c', fresh) == fresh then hist_trim(K.hist, now) end
  hist_add(K.hist, now, 'l', late_sum)
  local xf = int(math.floor(now / 60000)) .. ':x'
  if late_max > (tonumber(redis.call('HGET', K.hist, xf)) or -1) then
    redis.call('HSET', K.hist, xf, int(late_max))
  end
end

if nz > 0 then
  active_add(K, za, la)
  if claim_id ~= '' then
    redis.call('HSET', claims, claim_id, int(now) .. ' ' .. table.concat(log, ' '))
  end
end
out[3] = first or -1
out[4] = active_earliest(K) or -1
local n_active, n_leases = active_counts(K)
if n_leases ~= n_active then out[5] = 1 end
out[11] = nz / 2
out[12] = nmissed
for i = 1, ngo do out[no + i] = grouped_out[i] end
for i = 1, nmissed do out[no + ngo + i] = missed[i] end
return out
