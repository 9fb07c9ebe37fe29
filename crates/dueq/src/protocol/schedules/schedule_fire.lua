-- schedule_fire: fires planned schedule ticks, each at most once however many processes try.
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] leases
--   KEYS[7] schedule_state  KEYS[8] schedule_next  KEYS[9..17] group keys, KEYS[18..27]
--   option keys (see lib.lua)
-- ARGV[1] task wake channel, ARGV[2] n (schedules in this batch), then 11 values per schedule:
--   name; expected next fire ms (the state's, as read when planning); missed ticks to count
--   as skipped; fire_once tick ms (-1 none) and its task spec; on-time tick ms (-1 none) and
--   its task spec; next fire ms after this step (-1 none); overlap ('a' allow | 's' skip);
--   the tasks' group ('' none); lead ms (how far ahead of its tick a tick may fire: 0 or
--   FIRE_AHEAD_MS, see sched_act_at)
--   A spec is the task record without its tail (lib.lua), business key
--   'schedule:<name>:<tick ms>' and priority inside it.
-- Returns: {now_ms, then per schedule: code, tasks created, ticks skipped (overlap + missed)}
--   code 1 applied; 0 stale (the state's next fire time is not the expected one: another
--   process fired it, or it was replaced, paused or resumed meanwhile; nothing written);
--   -1 gone (deleted); -2 paused; -3 not due yet by this script's clock, or a tick fired
--   ahead still waits (nothing written)
-- A tick is claimed atomically by comparing the stored next fire time (and requiring it to
-- be after the last fired tick), so a tick fires exactly once. The task's due time is the
-- tick, so it is handed out by the normal claim path, never early, also when it was fired
-- up to `lead` ms ahead of it.
local sched, tasks, keys, meta, stats, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local state, index = KEYS[7], KEYS[8]
local G = group_keys(9)
G.meta = meta
local O = option_keys(18)
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local now = now_ms()
local created_at = struct.pack('<I6', now)
local before = earliest_due(sched, G)
local soonest = nil

-- whether the task under business key `key` is live (scheduled, in its priority's set or its
-- group, or active)
local function live(key)
  local id = redis.call('HGET', keys, key)
  if not id then return false end
  if redis.call('HEXISTS', leases, id) == 1 then return true end
  local rec = redis.call('HGET', tasks, id)
  if not (rec and rec_ok(rec)) then return false end
  return redis.call('ZSCORE', O.s[rec_prio(rec)], id) ~= false
    or redis.call('ZSCORE', G.gdue, id) ~= false
end

-- The work is batched: one HMGET of the states, one of the ticks' keys, then one write per
-- hash or set for all ticks. Per schedule it stays with plain locals and ARGV strings (a
-- table or a number formatted per tick costs about as much as a Redis command).
local names = {}
for i = 1, n do names[i] = ARGV[2 + (i - 1) * 11 + 1] end

-- 1. claim each schedule's step against its state; plan the ticks to create. A number is
-- read from its text once, and only when it is not -1 or 0 (`tonumber` of a 13-digit time
-- costs about as much as a Redis command's share per tick).
local states = hmget_chunked(state, names)
local code, made, skipped = {}, {}, {}
-- per applied schedule: the fields of its new state (`fired` may still rise in step 3) and its
-- index score (nil: it leaves the index), joined into the state's text in step 4
local last_of, sk_of, paused_of, fired_of, fp_of, prev_of, act_of = {}, {}, {}, {}, {}, {}, {}
local todo_i, todo_key, todo_at, todo_tick, todo_spec, nt = {}, {}, {}, {}, {}, 0
local lead_s, lead = nil, 0
for i = 1, n do
  local b = 2 + (i - 1) * 11
  local name, expect = names[i], ARGV[b + 2]
  local next_at, last, skipped_total, paused, fired, fp, prev
  if states[i] then next_at, last, skipped_total, paused, fired, fp, prev = sched_state(states[i]) end
  code[i], made[i], skipped[i] = 1, 0, 0
  -- one lead for every schedule as a rule
  if ARGV[b + 11] ~= lead_s then lead_s = ARGV[b + 11] lead = tonumber(lead_s) end
  local once_s, fire_s = ARGV[b + 4], ARGV[b + 6]
  local once_at = once_s == '-1' and -1 or tonumber(once_s)
  local fire_at = fire_s == '-1' and -1 or tonumber(fire_s)
  local last_n = next_at and tonumber(last)
  if not next_at then
    code[i] = -1
  elseif paused == '1' then
    code[i] = -2
  elseif next_at ~= expect or tonumber(expect) <= last_n then
    code[i] = 0
  elseif once_at > now or fire_at > now + lead or (fire_at > now and last_n > now) then
    code[i] = -3
  else
    local overlap_skip = ARGV[b + 9] == 's'
    local sk = ARGV[b + 3]
    sk = sk == '0' and 0 or tonumber(sk)
    local planned = false
    -- the once tick (ARGV b+4, spec b+5), then the on-time tick (b+6, spec b+7)
    for k = 0, 2, 2 do
      local at, at_s = once_at, once_s
      if k == 2 then at, at_s = fire_at, fire_s end
      if at >= 0 and at > last_n then
        -- the previous tick's task: live if planned just now, else looked up
        if overlap_skip and last_n >= 0
            and (planned or live('schedule:' .. name .. ':' .. last)) then
          sk = sk + 1
        else
          nt = nt + 1
          todo_i[nt], todo_key[nt], todo_at[nt] = i, 'schedule:' .. name .. ':' .. at_s, at
          todo_spec[nt], todo_tick[nt] = ARGV[b + 5 + k], at_s
          prev, last, last_n, planned = last, at_s, at, true
        end
      end
    end
    skipped[i] = sk
    if sk > 0 then skipped_total = int(tonumber(skipped_total) + sk) end
    -- the index score: sched_act_at's rule, with the numbers already read
    local next_s = ARGV[b + 8]
    if next_s ~= '-1' then
      local act = tonumber(next_s) - lead
      if act <= last_n then act_of[i] = last
      elseif lead == 0 then act_of[i] = next_s
      else act_of[i] = int(act) end
    end
    last_of[i], sk_of[i], paused_of[i] = last, skipped_total, paused
    fired_of[i], fp_of[i], prev_of[i] = fired, fp, prev
  end
end

-- 2. a tick whose key already has a live task keeps that task
local found = hmget_chunked(keys, todo_key)
local count = 0
for j = 1, nt do
  if found[j] and live(todo_key[j]) then todo_i[j] = false else count = count + 1 end
end

-- 3. create the tasks
if count > 0 then
  local seq = redis.call('HINCRBY', meta, 'seq', count) - count
  local recs, kargs, byprio, nby, used, grouped, gused = {}, {}, {}, {}, {}, {}, {}
  local nr, tails = 0, {}
  for j = 1, nt do
    local i = todo_i[j]
    if i then
      seq = seq + 1
      local id = string.format('%012x', seq)
      local spec, at = todo_spec[j], todo_at[j]
      local p = rec_prio(spec)
      recs[nr + 1] = id
      local tail = tails[at]
      if not tail then tail = struct.pack('<I6', at) .. created_at tails[at] = tail end
      recs[nr + 2] = spec .. tail
      kargs[nr + 1] = todo_key[j]
      kargs[nr + 2] = id
      nr = nr + 2
      local group = ARGV[2 + (i - 1) * 11 + 10]
      if group ~= '' then
        grouped[#grouped + 1] = {group, id, at, p}
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
      if soonest == nil or at < soonest then soonest = at end
    end
  end
  chunked('HSET', tasks, recs)
  for p, z in pairs(byprio) do chunked('ZADD', O.s[p], z) end
  prios_mark(meta, used)
  if #grouped > 0 then
    prios_mark(meta, gused, 'gprio')
    G.pl = nil
    for _, g in ipairs(grouped) do gschedule(G, g[1], g[2], g[3], now, g[4]) end
  end
  chunked('HSET', keys, kargs)
  redis.call('HINCRBY', stats, 'enqueued_total', count)
end

-- 4. the new states and index scores
local out, sargs, zargs, zrem, ns, nz = {now}, {}, {}, {}, 0, 0
for i = 1, n do
  if code[i] == 1 then
    local fired = fired_of[i]
    if made[i] > 0 then fired = int(tonumber(fired) + made[i]) end
    sargs[ns + 1] = names[i]
    sargs[ns + 2] = ARGV[2 + (i - 1) * 11 + 8] .. ' ' .. last_of[i] .. ' ' .. sk_of[i] .. ' '
      .. paused_of[i] .. ' ' .. fired .. ' ' .. fp_of[i] .. '/' .. prev_of[i]
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
chunked('ZADD', index, zargs)
chunked('ZREM', index, zrem)
if soonest ~= nil then wake(channel, soonest, before) end
return out
