-- dead_delete: deletes tasks from the dead-letter queue for good.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] n, then n task ids
-- Returns: {now_ms, then per task: 1 deleted | 0 not_found}
local K = queue_keys()
local now = now_ms()
local out = {now}
for i = 1, tonumber(ARGV[1]) do
  local id = ARGV[1 + i]
  if redis.call('ZSCORE', K.dead, id) then
    dead_delete_one(K, id, redis.call('HGET', K.tasks, id))
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
