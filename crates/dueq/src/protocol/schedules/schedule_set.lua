-- schedule_set: creates or replaces a schedule by name (idempotent: the same definition twice
--   changes nothing).
-- KEYS[1] schedules (hash name -> definition)  KEYS[2] schedule_state (hash name -> state)
-- KEYS[3] schedule_next (sorted set name -> next fire ms)
-- ARGV[1] name, ARGV[2] definition, ARGV[3] timing fingerprint, ARGV[4] schedule wake channel,
--   ARGV[5..] the next fire times after the client's reading of the Redis time, ascending
-- Returns: {now_ms, outcome ('created' | 'replaced' | 'unchanged'), next fire ms or -1 (none,
--   or paused)}
-- State is "next last skipped paused fired fingerprint" (next -1 when none, last -1 before the
-- first fire). A replace that keeps the timing (same fingerprint) keeps the next fire time
-- and every counter; a replace keeps the paused flag (registering at start-up must not resume
-- a schedule an operator paused).
local defs, state, index = KEYS[1], KEYS[2], KEYS[3]
local name, def, fp, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
-- the first given fire time after the script's own now (the list is a few ticks long)
local pick = -1
for i = 5, #ARGV do
  local t = tonumber(ARGV[i])
  if t > now then pick = t break end
end
local old = redis.call('HGET', defs, name)
local st = redis.call('HGET', state, name)
local next_at, last, skipped, paused, fired, old_fp
if st then
  next_at, last, skipped, paused, fired, old_fp =
    string.match(st, '^(%-?%d+) (%-?%d+) (%d+) (%d) (%d+) (%S*)$')
end
if old == def and next_at then
  if paused == '1' then return {now, 'unchanged', -1} end
  return {now, 'unchanged', tonumber(next_at)}
end
local outcome = 'replaced'
if not next_at then
  outcome = 'created'
  next_at, last, skipped, paused, fired = int(pick), '-1', '0', '0', '0'
elseif old_fp ~= fp then
  next_at = int(pick)
end
redis.call('HSET', defs, name, def)
redis.call('HSET', state, name, table.concat({next_at, last, skipped, paused, fired, fp}, ' '))
if paused == '0' and tonumber(next_at) >= 0 then
  redis.call('ZADD', index, next_at, name)
else
  redis.call('ZREM', index, name)
end
redis.call('PUBLISH', channel, next_at)
if paused == '1' then return {now, outcome, -1} end
return {now, outcome, tonumber(next_at)}
