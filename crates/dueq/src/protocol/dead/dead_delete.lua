-- dead_delete: deletes tasks from the dead-letter queue for good.
-- KEYS[1] dead  KEYS[2] tasks  KEYS[3] errors  KEYS[4] groups  KEYS[5] dead_keys
-- ARGV[1] n, then n task ids
-- Returns: {now_ms, then per task: 1 deleted | 0 not_found}
local dead, tasks = KEYS[1], KEYS[2]
local now = now_ms()
local out = {now}
for i = 1, tonumber(ARGV[1]) do
  local id = ARGV[1 + i]
  if redis.call('ZREM', dead, id) == 1 then
    dead_key_drop(KEYS[5], redis.call('HGET', tasks, id), id)
    redis.call('HDEL', tasks, id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
