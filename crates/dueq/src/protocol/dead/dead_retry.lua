-- dead_retry: moves dead tasks back to scheduled, due now, with a fresh attempt count.
-- KEYS: queue_keys, Span::Dead (keys.rs). A task retried goes back to its group or to its
--   priority's set, and has no expiry.
-- ARGV[1] wake channel, ARGV[2] n, then n task ids
-- Returns: {now_ms, then per task: 'retried' | 'not_found' | 'conflict' (its business key is
--   live again on another task)}
local K = queue_keys()
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {now}
local before = earliest_due(K)
local any = false
for i = 1, n do
  local id = ARGV[2 + i]
  local rec = redis.call('ZSCORE', K.dead, id) and redis.call('HGET', K.tasks, id)
  if not rec or not rec_ok(rec) then
    out[#out + 1] = 'not_found'
  else
    local r = dead_retry_one(K, id, rec, now, now)
    out[#out + 1] = r
    any = any or r == 'retried'
  end
end
if any then wake(ARGV[1], now, before) end
return out
