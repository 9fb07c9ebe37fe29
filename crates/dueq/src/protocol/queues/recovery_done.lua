-- recovery_done: what a recoverer found on the queues recovery_due handed it: each queue's
--   entry in the recovery index moves to its next lease deadline or expiry (kept when a claim
--   meanwhile wrote an earlier one), or, with none, goes, unless a claim moved it off the mark
--   meanwhile (its lease may be newer than what the recoverer read).
-- KEYS: global_key('recovery'): dueq:recovery
-- ARGV[1] mark (as recovery_due returned it), then per queue: name, next ms (-1 = none)
-- Returns: {now_ms, removed}
local K = global_key('recovery')
local now = now_ms()
local mark = tonumber(ARGV[1])
local removed = 0
for i = 2, #ARGV - 1, 2 do
  local name, next_ms = ARGV[i], tonumber(ARGV[i + 1])
  if next_ms >= 0 then
    redis.call('ZADD', K.recovery, 'LT', next_ms, name)
  elseif tonumber(redis.call('ZSCORE', K.recovery, name) or '-1') == mark then
    redis.call('ZREM', K.recovery, name)
    removed = removed + 1
  end
end
return {now, removed}
