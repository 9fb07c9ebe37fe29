-- schedule_due: the schedules a firer should act on now (their score in `schedule_next`,
--   sched_act_at in lib/schedules.lua, has come: a tick is due or may fire ahead), with what firing
--   them needs.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] most schedules to return (at most 1000)  ARGV[2] spread (a random number, 0 = none)
-- Returns: {now_ms, earliest score (when to act next) or -1, then name, definition, state,
--   fired ticks ('' none) per schedule to act on}
-- An index entry without a definition or state (left by hand) is dropped.
-- With more schedules due than one batch, `spread` picks which batch: the due entries are the
-- index's lowest ranks, so a slice of them at a random rank is as cheap as the first one, and
-- processes firing at once take mostly different schedules instead of racing for the same
-- ones (the loser of a race is refused and has done its work for nothing).
local K = queue_keys()
local index, defs, state, ticks = K.schedule_next, K.schedules, K.schedule_state,
  K.schedule_fired
local now = now_ms()
local max = math.min(tonumber(ARGV[1]), 1000)
local spread = tonumber(ARGV[2] or '0') or 0
local due = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, max)
-- a full first batch: maybe more are due (an idle look reads no more than before)
if spread > 0 and #due == max then
  local count = redis.call('ZCOUNT', index, '-inf', now)
  if count > max then
    local from = spread % (count - max + 1)
    due = redis.call('ZRANGE', index, from, from + max - 1)
  end
end
local out, n = {now, -1}, 2
local defs_of, states_of = hmget_chunked(defs, due), hmget_chunked(state, due)
local ticks_of = hmget_chunked(ticks, due)
local gone = {}
for i = 1, #due do
  local def, st = defs_of[i], states_of[i]
  if def and st then
    out[n + 1] = due[i]; out[n + 2] = def; out[n + 3] = st; out[n + 4] = ticks_of[i] or ''
    n = n + 4
  else
    gone[#gone + 1] = due[i]
  end
end
chunked('ZREM', index, gone)
local first = earliest(index)
if first then out[2] = first end
return out
