-- schedule_due: the schedules whose next fire time has come, with what firing them needs.
-- KEYS[1] schedule_next  KEYS[2] schedules  KEYS[3] schedule_state
-- ARGV[1] most schedules to return (at most 1000)
-- Returns: {now_ms, earliest next fire ms or -1, then name, definition, state per due schedule}
-- An index entry without a definition or state (left by hand) is dropped.
local index, defs, state = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0,
  math.min(tonumber(ARGV[1]), 1000))
local out, n = {now, -1}, 2
for i = 1, #due do
  local def = redis.call('HGET', defs, due[i])
  local st = redis.call('HGET', state, due[i])
  if def and st then
    out[n + 1] = due[i]; out[n + 2] = def; out[n + 3] = st; n = n + 3
  else
    redis.call('ZREM', index, due[i])
  end
end
local first = earliest(index)
if first then out[2] = first end
return out
