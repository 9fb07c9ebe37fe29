-- dead_delete: deletes tasks from the dead-letter queue for good.
-- KEYS[1] dead  KEYS[2] tasks  KEYS[3] errors  KEYS[4] groups  KEYS[5] dead_keys
-- ARGV[1] n, then n task ids
-- Returns: {now_ms, then per task: 1 deleted | 0 not_found}
local D = {dead = KEYS[1], tasks = KEYS[2], errors = KEYS[3], G = {groups = KEYS[4]},
  dead_keys = KEYS[5]}
local now = now_ms()
local out = {now}
for i = 1, tonumber(ARGV[1]) do
  local id = ARGV[1 + i]
  if redis.call('ZSCORE', D.dead, id) then
    dead_delete_one(D, id, redis.call('HGET', D.tasks, id))
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
