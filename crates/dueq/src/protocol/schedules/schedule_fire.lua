-- schedule_fire: fires planned schedule ticks, each at most once however many processes try.
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] leases
-- KEYS[7] schedule_state  KEYS[8] schedule_next  KEYS[9..17] group keys, KEYS[18..27]
--   option keys (see lib.lua)
-- ARGV[1] task wake channel, ARGV[2] n (schedules in this batch), then 10 values per schedule:
--   name; expected next fire ms (the state's, as read when planning); missed ticks to count
--   as skipped; fire_once tick ms (-1 none) and its task spec; on-time tick ms (-1 none) and
--   its task spec; next fire ms after this step (-1 none); overlap ('a' allow | 's' skip);
--   the tasks' group ('' none)
--   A spec is the task record without its tail (lib.lua), business key
--   'schedule:<name>:<tick ms>' and priority inside it.
-- Returns: {now_ms, then per schedule: code, tasks created, ticks skipped (overlap + missed)}
--   code 1 applied; 0 stale (the state's next fire time is not the expected one: another
--   process fired it, or it was replaced, paused or resumed meanwhile; nothing written);
--   -1 gone (deleted); -2 paused; -3 not due yet by this script's clock (nothing written)
-- A tick is claimed atomically by comparing the stored next fire time (and requiring it to
-- be after the last fired tick), so a tick fires exactly once. The task's due time is the
-- tick, so it is handed out by the normal claim path, never early.
local sched, tasks, keys, meta, stats, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local state, index = KEYS[7], KEYS[8]
local G = group_keys(9)
G.meta = meta
local O = option_keys(18)
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local now = now_ms()
local created_at = struct.pack('<I6', now)
local out, no = {now}, 1
local before = earliest_due(sched, G)
local soonest = nil
local created_total = 0

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

local function create(key, at, spec, group)
  if live(key) then return false end
  local id = string.format('%012x', redis.call('HINCRBY', meta, 'seq', 1))
  local p = rec_prio(spec)
  redis.call('HSET', tasks, id, spec .. struct.pack('<I6', at) .. created_at)
  if group ~= '' then
    if p > 0 then
      prios_mark(meta, {[p] = true}, 'gprio')
      G.pl = nil
    end
    gschedule(G, group, id, at, now, p)
  else
    if p > 0 then prios_mark(meta, {[p] = true}) end
    redis.call('ZADD', O.s[p], at, id)
  end
  redis.call('HSET', keys, key, id)
  if soonest == nil or at < soonest then soonest = at end
  return true
end

for i = 1, n do
  local b = 2 + (i - 1) * 10
  local name, expect = ARGV[b + 1], ARGV[b + 2]
  local missed = tonumber(ARGV[b + 3])
  local once_at, once_spec = tonumber(ARGV[b + 4]), ARGV[b + 5]
  local fire_at, fire_spec = tonumber(ARGV[b + 6]), ARGV[b + 7]
  local new_next, overlap_skip = ARGV[b + 8], ARGV[b + 9] == 's'
  local group = ARGV[b + 10]
  local code, made, skipped = 1, 0, 0
  local st = redis.call('HGET', state, name)
  local next_at, last, skipped_total, paused, fired, fp
  if st then
    next_at, last, skipped_total, paused, fired, fp =
      string.match(st, '^(%-?%d+) (%-?%d+) (%d+) (%d) (%d+) (%S*)$')
  end
  if not next_at then
    code = -1
  elseif paused == '1' then
    code = -2
  elseif next_at ~= expect or tonumber(expect) <= tonumber(last) then
    code = 0
  elseif once_at > now or fire_at > now then
    code = -3
  else
    last = tonumber(last)
    skipped = missed
    for _, t in ipairs({{once_at, once_spec}, {fire_at, fire_spec}}) do
      local at, spec = t[1], t[2]
      if at >= 0 and at > last then
        if overlap_skip and last >= 0 and live('schedule:' .. name .. ':' .. int(last)) then
          skipped = skipped + 1
        else
          if create('schedule:' .. name .. ':' .. int(at), at, spec, group) then made = made + 1 end
          last = at
        end
      end
    end
    redis.call('HSET', state, name, table.concat({new_next, int(last),
      int(tonumber(skipped_total) + skipped), paused, int(tonumber(fired) + made), fp}, ' '))
    if tonumber(new_next) >= 0 then
      redis.call('ZADD', index, new_next, name)
    else
      redis.call('ZREM', index, name)
    end
    created_total = created_total + made
  end
  out[no + 1] = code; out[no + 2] = made; out[no + 3] = skipped; no = no + 3
end
if created_total > 0 then redis.call('HINCRBY', stats, 'enqueued_total', created_total) end
if soonest ~= nil then wake(channel, soonest, before) end
return out
