-- schedule_pause: pauses or resumes a schedule. Ticks while paused are neither fired nor
--   counted as skipped; a resume continues at the schedule's first tick after now.
-- KEYS[1] schedule_state  KEYS[2] schedule_next
-- ARGV[1] name, ARGV[2] paused (0|1), ARGV[3] schedule wake channel, ARGV[4..] for a resume,
--   the next fire times after the client's reading of the Redis time, ascending
-- Returns: {now_ms, 1 if the schedule exists else 0, next fire ms or -1}
local state, index = KEYS[1], KEYS[2]
local name, flag = ARGV[1], ARGV[2]
local now = now_ms()
local st = redis.call('HGET', state, name)
if not st then return {now, 0, -1} end
local next_at, last, skipped, paused, fired, fp =
  string.match(st, '^(%-?%d+) (%-?%d+) (%d+) (%d) (%d+) (%S*)$')
if not next_at then return redis.error_reply('dueq: unreadable schedule state of ' .. name) end
if paused == flag then
  if flag == '1' then return {now, 1, -1} end
  return {now, 1, tonumber(next_at)}
end
if flag == '1' then
  redis.call('ZREM', index, name)
else
  next_at = '-1'
  for i = 4, #ARGV do
    if tonumber(ARGV[i]) > now then next_at = ARGV[i] break end
  end
  if tonumber(next_at) >= 0 then redis.call('ZADD', index, next_at, name) end
  redis.call('PUBLISH', ARGV[3], next_at)
end
redis.call('HSET', state, name, table.concat({next_at, last, skipped, flag, fired, fp}, ' '))
if flag == '1' then return {now, 1, -1} end
return {now, 1, tonumber(next_at)}
