-- priorities: the ungrouped scheduled sets by priority. Ungrouped scheduled tasks sit in one
--   sorted set per priority: `K.sched` (`K.s[0]`) for priority 0, `K.s[1]` .. `K.s[9]` for
--   priorities 1 to 9. The meta field `prio` is a bitmask (2^p) of the priorities above 0 ever
--   used, so a claim reads only the sets in use, and a queue that never used a priority reads
--   `sched` alone. Bits are set by the enqueue that first uses a priority and never cleared (an
--   empty set costs one read), so every script that puts a task back into its set finds the
--   bit already set. `K.expiry` (sorted set id -> expires_at_ms) holds the scheduled tasks with
--   an expiry that have not started; the meta field `exp` is 1 once any task of the queue had
--   one (expiry itself: lifecycle.lua).

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
local function earliest_plain(K, pl, pn)
  local best = nil
  for i = 1, pn do
    local e = earliest(K.s[pl[i]])
    if e and (not best or e < best) then best = e end
  end
  return best
end
