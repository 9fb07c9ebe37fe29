-- schedule_set: creates or replaces a schedule by name (idempotent: the same definition twice
--   changes nothing).
-- KEYS: queue_keys, Span::All (keys.rs). `schedules`: hash name -> definition;
--   `schedule_state`: hash name -> state; `schedule_next`: sorted set name -> when to act,
--   sched_act_at; `schedule_fired`: sched_ticks
-- ARGV[1] name, ARGV[2] definition, ARGV[3] timing fingerprint, ARGV[4] schedule wake channel,
--   ARGV[5] lead ms, ARGV[6] refill (see schedule_fire.lua), ARGV[7..] the next fire times
--   after the client's reading of the Redis time, ascending
-- Returns: {now_ms, outcome ('created' | 'replaced' | 'unchanged' | 'stale'), next fire ms
--   or -1 (none, or paused)}; 'stale' (nothing written) when the offered times were all
--   past by the script's now although the grid goes on: offer newer ones
-- State: see sched_state (lib/schedules.lua). A replace that keeps the timing (same fingerprint) keeps
-- the next fire time and every counter; a replace keeps the paused flag (registering at
-- start-up must not resume a schedule an operator paused). A changed definition takes back
-- the ticks fired ahead whose tasks still wait (sched_withdraw), so those ticks fire by the
-- new definition: with the same timing the first of them is the next tick again.
local K = queue_keys()
local state, index, ticks, defs = K.schedule_state, K.schedule_next, K.schedule_fired,
  K.schedules
local name, def, fp, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local lead, refill = tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
-- the first given fire time after the script's own now (the list is a few ticks long)
local pick = -1
for i = 7, #ARGV do
  local t = tonumber(ARGV[i])
  if t > now then pick = t break end
end
local old = redis.call('HGET', defs, name)
local st = redis.call('HGET', state, name)
local next_at, last, skipped, paused, fired, old_fp, prev
if st then next_at, last, skipped, paused, fired, old_fp, prev = sched_state(st) end
local S, N = {}, {}
if next_at then S, N = sched_ticks(redis.call('HGET', ticks, name), last, prev) end
if old == def and next_at then
  if paused == '1' then return {now, 'unchanged', -1} end
  -- the first tick fired ahead is the next one to come
  for i = 1, #N do
    if N[i] > now then return {now, 'unchanged', N[i]} end
  end
  return {now, 'unchanged', tonumber(next_at)}
end
local stale = pick < 0 and #ARGV >= 7
if stale and (not next_at or old_fp ~= fp) then return {now, 'stale', -1} end
local outcome = 'replaced'
if not next_at then
  outcome = 'created'
  next_at, last, skipped, paused, fired, prev = int(pick), '-1', '0', '0', '0', '-1'
else
  local first
  first, last, prev, fired = sched_withdraw(K, name, S, N, fired, now)
  if old_fp ~= fp then
    next_at = int(pick)
  elseif first then
    next_at = first
  end
end
redis.call('HSET', defs, name, def)
redis.call('HSET', state, name, sched_state_text(next_at, last, skipped, paused, fired, fp, prev))
if #S > 0 then
  redis.call('HSET', ticks, name, sched_ticks_text(S, #S))
else
  redis.call('HDEL', ticks, name)
end
if paused == '0' and tonumber(next_at) >= 0 then
  redis.call('ZADD', index, sched_act_at(next_at, N, lead, refill), name)
else
  redis.call('ZREM', index, name)
end
redis.call('PUBLISH', channel, next_at)
if paused == '1' then return {now, outcome, -1} end
return {now, outcome, tonumber(next_at)}
