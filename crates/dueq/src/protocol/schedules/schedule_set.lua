-- schedule_set: creates or replaces a schedule by name (idempotent: the same definition twice
--   changes nothing).
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] errors
--   KEYS[7] schedule_state  KEYS[8] schedule_next  KEYS[9..17] group keys, KEYS[18..27]
--   option keys (see lib.lua)  KEYS[28] schedules (hash name -> definition)
--   (schedule_state: hash name -> state; schedule_next: sorted set name -> when to act,
--   sched_act_at)
-- ARGV[1] name, ARGV[2] definition, ARGV[3] timing fingerprint, ARGV[4] schedule wake channel,
--   ARGV[5] lead ms (see schedule_fire.lua), ARGV[6..] the next fire times after the client's
--   reading of the Redis time, ascending
-- Returns: {now_ms, outcome ('created' | 'replaced' | 'unchanged' | 'stale'), next fire ms
--   or -1 (none, or paused)}; 'stale' (nothing written) when the offered times were all
--   past by the script's now although the grid goes on: offer newer ones
-- State: see sched_state (lib.lua). A replace that keeps the timing (same fingerprint) keeps
-- the next fire time and every counter; a replace keeps the paused flag (registering at
-- start-up must not resume a schedule an operator paused). A changed definition takes back a
-- tick fired ahead whose task still waits (sched_withdraw), so that tick fires by the new
-- definition: with the same timing it is the next tick again.
local T = {tasks = KEYS[2], keys = KEYS[3], stats = KEYS[5], errors = KEYS[6]}
local G = group_keys(9)
G.meta = KEYS[4]
local O = option_keys(18)
local state, index, defs = KEYS[7], KEYS[8], KEYS[28]
local name, def, fp, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lead = tonumber(ARGV[5])
local now = now_ms()
-- the first given fire time after the script's own now (the list is a few ticks long)
local pick = -1
for i = 6, #ARGV do
  local t = tonumber(ARGV[i])
  if t > now then pick = t break end
end
local old = redis.call('HGET', defs, name)
local st = redis.call('HGET', state, name)
local next_at, last, skipped, paused, fired, old_fp, prev
if st then next_at, last, skipped, paused, fired, old_fp, prev = sched_state(st) end
if old == def and next_at then
  if paused == '1' then return {now, 'unchanged', -1} end
  -- a tick fired ahead is the next one to come
  if tonumber(last) > now then return {now, 'unchanged', tonumber(last)} end
  return {now, 'unchanged', tonumber(next_at)}
end
local stale = pick < 0 and #ARGV >= 6
if stale and (not next_at or old_fp ~= fp) then return {now, 'stale', -1} end
local outcome = 'replaced'
if not next_at then
  outcome = 'created'
  next_at, last, skipped, paused, fired, prev = int(pick), '-1', '0', '0', '0', '-1'
else
  local back, undone = last, false
  undone, last, prev, fired = sched_withdraw(T, G, O, name, last, prev, fired, now)
  if old_fp ~= fp then
    next_at = int(pick)
  elseif undone then
    next_at = back
  end
end
redis.call('HSET', defs, name, def)
redis.call('HSET', state, name, sched_state_text(next_at, last, skipped, paused, fired, fp, prev))
if paused == '0' and tonumber(next_at) >= 0 then
  redis.call('ZADD', index, sched_act_at(next_at, last, lead), name)
else
  redis.call('ZREM', index, name)
end
redis.call('PUBLISH', channel, next_at)
if paused == '1' then return {now, outcome, -1} end
return {now, outcome, tonumber(next_at)}
