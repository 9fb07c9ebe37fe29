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
local function sched_withdraw(K, name, S, N, fired, now)
  local n = #N
  local k, first = n, nil
  while k > 0 and N[k] > now do
    local id = key_id(redis.call('HGET', K.keys, 'schedule:' .. name .. ':' .. S[k]))
    if id then unschedule(K, id, redis.call('HGET', K.tasks, id)) end
    first = S[k]
    S[k], N[k] = nil, nil
    k = k - 1
  end
  if first then fired = int(math.max(tonumber(fired) - (n - k), 0)) end
  return first, S[k] or '-1', S[k - 1] or '-1', fired
end
