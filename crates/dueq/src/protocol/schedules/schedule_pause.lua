-- schedule_pause: pauses or resumes a schedule. Ticks while paused are neither fired nor
--   counted as skipped; a resume continues at the schedule's first tick after now. A pause
--   takes back the ticks fired ahead whose tasks still wait (sched_withdraw); so does a
--   resume, for ticks a pause by an older version (which took back only the newest) left.
-- KEYS: queue_keys, Span::All (keys.rs)
-- ARGV[1] name, ARGV[2] paused (0|1), ARGV[3] schedule wake channel, ARGV[4] lead ms,
--   ARGV[5] refill (see schedule_fire.lua), ARGV[6..] for a resume, the next fire times after
--   the client's reading of the Redis time, ascending
-- Returns: {now_ms, 1 if the schedule exists else 0, next fire ms or -1}; for a resume
--   whose offered times were all past by the script's now, {now_ms, 2, -1} (stale, nothing
--   written: offer newer ones)
local K = queue_keys()
local state, index, ticks = K.schedule_state, K.schedule_next, K.schedule_fired
local name, flag, lead, refill = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local st = redis.call('HGET', state, name)
if not st then return {now, 0, -1} end
local next_at, last, skipped, paused, fired, fp, prev = sched_state(st)
if not next_at then return redis.error_reply('dueq: unreadable schedule state of ' .. name) end
local S, N = sched_ticks(redis.call('HGET', ticks, name), last, prev)
if paused == flag then
  if flag == '1' then return {now, 1, -1} end
  for i = 1, #N do
    if N[i] > now then return {now, 1, N[i]} end
  end
  return {now, 1, tonumber(next_at)}
end
if flag == '0' then
  next_at = '-1'
  for i = 6, #ARGV do
    if tonumber(ARGV[i]) > now then next_at = ARGV[i] break end
  end
  if next_at == '-1' and #ARGV >= 6 then return {now, 2, -1} end
end
local _
_, last, prev, fired = sched_withdraw(K, name, S, N, fired, now)
if #S > 0 then
  redis.call('HSET', ticks, name, sched_ticks_text(S, #S))
else
  redis.call('HDEL', ticks, name)
end
if flag == '1' then
  redis.call('ZREM', index, name)
else
  if tonumber(next_at) >= 0 then
    redis.call('ZADD', index, sched_act_at(next_at, N, lead, refill), name)
  end
  redis.call('PUBLISH', ARGV[3], next_at)
end
redis.call('HSET', state, name, sched_state_text(next_at, last, skipped, flag, fired, fp, prev))
if flag == '1' then return {now, 1, -1} end
return {now, 1, tonumber(next_at)}
