-- dead_retry: moves dead tasks back to scheduled, due now, with a fresh attempt count.
-- KEYS[1] sched  KEYS[2] dead  KEYS[3] tasks  KEYS[4] keys  KEYS[5] errors
-- KEYS[6..14] group keys (see lib/; a task retried goes back to its group), KEYS[15..24]
--   option keys (see lib/; it goes back to its priority's set, and has no expiry)
-- KEYS[25] meta  KEYS[26] dead_keys
-- ARGV[1] wake channel, ARGV[2] n, then n task ids
-- Returns: {now_ms, then per task: 'retried' | 'not_found' | 'conflict' (its business key is
--   live again on another task)}
local D = {dead = KEYS[2], tasks = KEYS[3], keys = KEYS[4], errors = KEYS[5],
  G = group_keys(6), O = option_keys(15), dead_keys = KEYS[26]}
D.G.meta = KEYS[25]
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {now}
local before = earliest_due(KEYS[1], D.G)
local any = false
for i = 1, n do
  local id = ARGV[2 + i]
  local rec = redis.call('ZSCORE', D.dead, id) and redis.call('HGET', D.tasks, id)
  if not rec or not rec_ok(rec) then
    out[#out + 1] = 'not_found'
  else
    local r = dead_retry_one(D, id, rec, now, now)
    out[#out + 1] = r
    any = any or r == 'retried'
  end
end
if any then wake(ARGV[1], now, before) end
return out
