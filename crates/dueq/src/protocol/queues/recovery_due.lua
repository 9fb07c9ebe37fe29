-- recovery_due: takes the queues whose earliest lease deadline or expiry has passed off the
--   front of the recovery index (`dueq:recovery`, queue -> when to look, ms). Each one's entry
--   moves to a mark, now + hold + 0.5 ms, until the recoverer reports back (recovery_done):
--   a claim meanwhile writes a whole-ms deadline below it (ZADD LT), which the report keeps.
-- KEYS: global_key('recovery'): dueq:recovery
-- ARGV[1] max (queues to take), ARGV[2] hold_ms
-- Returns: {now_ms, mark, then the queue names}
local K = global_key('recovery')
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', K.recovery, '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local mark = now + tonumber(ARGV[2]) + 0.5
local n = #due
if n > 0 then
  local args = {}
  for i = 1, n do
    args[2 * i - 1] = mark
    args[2 * i] = due[i]
  end
  chunked('ZADD', K.recovery, args)
end
local out = {now, string.format('%.1f', mark)}
for i = 1, n do out[i + 2] = due[i] end
return out
