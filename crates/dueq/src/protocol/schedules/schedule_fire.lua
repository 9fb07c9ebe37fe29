-- schedule_fire: fires planned schedule ticks, each at most once however many processes try.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] task wake channel, ARGV[2] n (schedules in this batch), ARGV[3] ahead_max (most
--   ticks of a schedule fired ahead of their time at once), ARGV[4] refill (a schedule is
--   acted on again once at most this many of them still wait, sched_act_at), then per
--   schedule: name; expected next fire ms (the state's, as read when planning); missed ticks
--   to count as skipped; c, the number of ticks to fire, then the c tick ms, ascending (a
--   fire_once tick for a missed span first, then the ticks from the next one on, the later
--   ones ahead of their time); next fire ms after them (-1 none); overlap ('a' allow | 's'
--   skip); the tasks' group ('' none); lead ms (how far ahead of its time a tick may fire: 0
--   or FIRE_AHEAD_MS); the ticks' task spec (the record without its tail, lib/record.lua) with an
--   empty key: each tick's task gets business key 'schedule:<name>:<tick ms>' put in; the
--   definition the step was planned from (as read); the misfire policy ('s' skip | 'o'
--   fire_once); misfire_grace_ms; the ticks' unique window in ms ('' the queue's
--   `unique_for_ms` setting; windows.lua). Each task carries its tick's misfire deadline and policy
--   (lib/record.lua): the tick + grace under skip, the next tick + grace under fire_once, so a task
--   that has not started by then is a missed tick. A fire_once tick already missed when it
--   fires is its span's one run and carries none, nor does a tick with no next tick.
-- Returns: {now_ms, then per schedule: code, tasks created, ticks skipped (overlap + missed)}
--   code 1 applied; 0 stale (the state's next fire time is not the expected one, or the
--   definition is not the one planned from: another process fired it, or it was replaced,
--   paused or resumed meanwhile; nothing written);
--   -1 gone (deleted); -2 paused; -3 a tick is too far ahead by this script's clock (after
--   now + lead, or more than ahead_max would wait; nothing written)
-- A tick is claimed atomically by comparing the stored next fire time (and requiring it to
-- be after the last fired tick), so a tick fires exactly once. The task's due time is the
-- tick, so it is handed out by the normal claim path, never early, also when it was fired
-- ahead of it.
local K = queue_keys()
-- locals for what the per-tick loops use: a table field is a lookup per use in Lua 5.1
local sched, tasks, keys, meta, stats, leases = K.sched, K.tasks, K.keys, K.meta, K.stats,
  K.leases
local state, index, ticks, defs = K.schedule_state, K.schedule_next, K.schedule_fired,
  K.schedules
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local ahead_max, refill = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local created_at = struct.pack('<I6', now)
local before = earliest_due(K)
local soonest = nil

-- whether the task under business key `key` is live (scheduled, in its priority's set or its
-- group, or active)
local function live(key)
  local id = key_id(redis.call('HGET', keys, key))
  if not id then return false end
  if redis.call('HEXISTS', leases, id) == 1 then return true end
  local rec = redis.call('HGET', tasks, id)
  if not (rec and rec_ok(rec)) then return false end
  return redis.call('ZSCORE', K.s[rec_prio(rec)], id) ~= false
    or redis.call('ZSCORE', K.gdue, id) ~= false
end

-- The work is batched: one HMGET of the states and fired ticks, one of the ticks' keys, then
-- one write per hash or set for all ticks. Per schedule it stays with plain locals and ARGV
-- strings (a table or a number formatted per tick costs about as much as a Redis command).
-- where each schedule's arguments start (its name), and how many ticks it carries
local names, at, cnt = {}, {}, {}
do
  local b = 5
  for i = 1, n do
    names[i], at[i] = ARGV[b], b
    local c = tonumber(ARGV[b + 3])
    cnt[i] = c
    b = b + 13 + c
  end
end

-- 1. claim each schedule's step against its state; plan the ticks to create.
local states = hmget_chunked(state, names)
local fired_texts = hmget_chunked(ticks, names)
local defs_now = hmget_chunked(defs, names)
local code, made, skipped = {}, {}, {}
-- per applied schedule: the fields of its new state (`fired` may still rise in step 3), its
-- fired ticks and its index score (nil: it leaves the index), joined in step 4
local last_of, sk_of, paused_of, fired_of, fp_of, S_of, act_of, next_of = {}, {}, {}, {}, {},
  {}, {}, {}
local todo_i, todo_key, todo_at, todo_tick, todo_dl, nt = {}, {}, {}, {}, {}, 0
local lead_s, lead = nil, 0
for i = 1, n do
  local b, c = at[i], cnt[i]
  local name, expect = names[i], ARGV[b + 1]
  local next_at, last, skipped_total, paused, fired, fp, prev
  if states[i] then next_at, last, skipped_total, paused, fired, fp, prev = sched_state(states[i]) end
  code[i], made[i], skipped[i] = 1, 0, 0
  local e = b + 4 + c -- next fire ms; overlap, group, lead, the spec and the definition follow
  -- one lead for every schedule as a rule
  if ARGV[e + 3] ~= lead_s then lead_s = ARGV[e + 3] lead = tonumber(lead_s) end
  local last_n = next_at and tonumber(last)
  if not next_at then
    code[i] = -1
  elseif paused == '1' then
    code[i] = -2
  elseif next_at ~= expect or defs_now[i] ~= ARGV[e + 5] then
    -- (a replace that keeps the timing may keep the next fire time: the definition tells
    -- that the ticks planned from the old one must not fire. A next fire time at or before
    -- `last`, left by an older version's change, needs no refusal: ticks at or before
    -- `last` are never fired again, below)
    code[i] = 0
  else
    local S, N = sched_ticks(fired_texts[i], last, prev)
    -- the step's ticks as numbers, and how many of the schedule's ticks wait ahead of their
    -- time after it (its fired ones, then the step's after now: both ascending)
    local tn, waiting = {}, 0
    for k = 1, c do tn[k] = tonumber(ARGV[b + 3 + k]) end
    for k = #N, 1, -1 do
      if N[k] > now then waiting = waiting + 1 else break end
    end
    for k = c, 1, -1 do
      if tn[k] > now then waiting = waiting + 1 else break end
    end
    local final = tn[c]
    if c > 0 and (final > now + lead or (final > now and waiting > ahead_max)) then
      code[i] = -3
    else
      local overlap_skip = ARGV[e + 1] == 's'
      local sk = ARGV[b + 2]
      sk = sk == '0' and 0 or tonumber(sk)
      local planned = false
      local ns = #S
      -- a tick's misfire deadline: its own time + grace (skip), or the next tick's of the
      -- grid (fire_once: the next in this step, else the next fire time; none without one)
      local once, grace = ARGV[e + 6] == 'o', tonumber(ARGV[e + 7])
      local next_n = tonumber(ARGV[e])
      for k = 1, c do
        local t_s, t = ARGV[b + 3 + k], tn[k]
        if t > last_n then
          -- the previous tick's task: live if planned just now, else looked up
          if overlap_skip and last_n >= 0
              and (planned or live('schedule:' .. name .. ':' .. last)) then
            sk = sk + 1
          else
            nt = nt + 1
            todo_i[nt], todo_key[nt], todo_at[nt] = i, 'schedule:' .. name .. ':' .. t_s, t
            todo_tick[nt] = t_s
            local d = t
            if once then
              d = tn[k + 1] or next_n
              if t + grace < now then d = -1 end
            end
            todo_dl[nt] = d >= 0 and d + grace or nil
            ns = ns + 1
            S[ns], N[ns] = t_s, t
            last, last_n, planned = t_s, t, true
          end
        end
      end
      skipped[i] = sk
      if sk > 0 then skipped_total = int(tonumber(skipped_total) + sk) end
      local next_s = ARGV[e]
      if next_s ~= '-1' then act_of[i] = sched_act_at(next_s, N, lead, refill) end
      next_of[i], last_of[i], sk_of[i], paused_of[i] = next_s, last, skipped_total, paused
      fired_of[i], fp_of[i], S_of[i] = fired, fp, S
    end
  end
end

-- 2. a tick whose key already has a live task keeps that task; one whose key is in the
-- unique window of its finished task (a tick taken back by a change and fired again) makes
-- none
local found = hmget_chunked(keys, todo_key)
local windows = nt > 0 and redis.call('EXISTS', K.uniq) == 1
local count = 0
for j = 1, nt do
  if (found[j] and live(todo_key[j])) or (windows and window_of(K, todo_key[j], now)) then
    todo_i[j] = false
  else
    count = count + 1
  end
end

-- 3. create the tasks
if count > 0 then
  local seq = redis.call('HINCRBY', meta, 'seq', count) - count
  local recs, kargs, byprio, nby, used, grouped, gused = {}, {}, {}, {}, {}, {}, {}
  local nr, tails = 0, {}
  -- the ticks' unique window per schedule (ms, 0 none), the queue's setting read once
  local wins, window_default = {}, nil
  -- the schedule whose spec is split (`head`, key field `kp` with the misfire bit, `body`
  -- after the key), its misfire policy and grace, and the record head for keys of `hlen`
  -- bytes; misfire deadlines packed, by value (many schedules share a tick)
  local si, head, kp, body, p, hlen, hdr, hkf
  local deadlines = {}
  for j = 1, nt do
    local i = todo_i[j]
    if i then
      seq = seq + 1
      local id = string.format('%012x', seq)
      local key, t = todo_key[j], todo_at[j]
      if i ~= si then
        local spec = ARGV[at[i] + 8 + cnt[i]]
        si, head = i, string.sub(spec, 1, HDR_LEN - 2)
        kp, body = struct_unpack('<I2', spec, HDR_LEN - 1), string.sub(spec, HDR_LEN + 1)
        p = rec_prio(spec)
        kp = kp - kp % KLEN_MOD + MISFIRE_BIT
        if ARGV[at[i] + 10 + cnt[i]] == 'o' then kp = kp + ONCE_BIT end
        hlen = nil
      end
      local dl, dls, kf = todo_dl[j], '', kp
      if dl then
        dls = deadlines[dl]
        if not dls then dls = struct.pack('<I6', dl) deadlines[dl] = dls end
      else
        kf = kp - kp % KLEN_MOD
      end
      if #key ~= hlen or kf ~= hkf then hlen, hkf = #key, kf hdr = head .. struct.pack('<I2', kf + hlen) end
      recs[nr + 1] = id
      local tail = tails[t]
      if not tail then tail = struct.pack('<I6', t) .. created_at tails[t] = tail end
      recs[nr + 2] = hdr .. key .. dls .. body .. tail
      local w = wins[i]
      if not w then
        local given = ARGV[at[i] + 12 + cnt[i]]
        if given == '' then
          window_default = window_default
            or tonumber(redis.call('HGET', meta, 'unique_for_ms') or '0') or 0
          w = window_default
        else
          w = tonumber(given) or 0
        end
        wins[i] = w
      end
      kargs[nr + 1] = key
      kargs[nr + 2] = key_entry(id, w)
      nr = nr + 2
      local group = ARGV[at[i] + 6 + cnt[i]]
      if group ~= '' then
        grouped[#grouped + 1] = {group, id, t, p}
        if p > 0 then gused[p] = true end
      else
        local z, m = byprio[p], nby[p] or 0
        if not z then z = {} byprio[p] = z end
        z[m + 1] = todo_tick[j]
        z[m + 2] = id
        nby[p] = m + 2
        if p > 0 then used[p] = true end
      end
      made[i] = made[i] + 1
      if soonest == nil or t < soonest then soonest = t end
    end
  end
  chunked('HSET', tasks, recs)
  for p, z in pairs(byprio) do chunked('ZADD', K.s[p], z) end
  prios_mark(meta, used)
  if #grouped > 0 then
    prios_mark(meta, gused, 'gprio')
    K.pl = nil
    for _, g in ipairs(grouped) do gschedule(K, g[1], g[2], g[3], now, g[4]) end
  end
  chunked('HSET', keys, kargs)
  redis.call('HINCRBY', stats, 'enqueued_total', count)
end

-- 4. the new states, fired ticks and index scores
local out, sargs, targs, zargs, zrem, ns, nz = {now}, {}, {}, {}, {}, 0, 0
for i = 1, n do
  if code[i] == 1 then
    local fired = fired_of[i]
    if made[i] > 0 then fired = int(tonumber(fired) + made[i]) end
    local S = S_of[i]
    sargs[ns + 1] = names[i]
    sargs[ns + 2] = next_of[i] .. ' ' .. last_of[i] .. ' ' .. sk_of[i] .. ' '
      .. paused_of[i] .. ' ' .. fired .. ' ' .. fp_of[i] .. '/' .. (S[#S - 1] or '-1')
    targs[ns + 1] = names[i]
    targs[ns + 2] = sched_ticks_text(S, ahead_max + 1)
    ns = ns + 2
    if act_of[i] then
      zargs[nz + 1] = act_of[i]
      zargs[nz + 2] = names[i]
      nz = nz + 2
    else
      zrem[#zrem + 1] = names[i]
    end
  end
  out[3 * i - 1] = code[i]
  out[3 * i] = made[i]
  out[3 * i + 1] = skipped[i]
end
chunked('HSET', state, sargs)
chunked('HSET', ticks, targs)
chunked('ZADD', index, zargs)
chunked('ZREM', index, zrem)
if soonest ~= nil then wake(channel, soonest, before) end
return out
