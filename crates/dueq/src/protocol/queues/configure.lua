-- configure: sets queue settings (pause/resume and retention caps) and wakes idle workers.
-- KEYS[1] meta
-- ARGV[1] wake channel, then name, value pairs; names: paused (0|1), dead_max, done_max
-- Returns: {now_ms}, or an error for an unknown name (nothing written)
local meta = KEYS[1]
local now = now_ms()
local allowed = {paused = true, dead_max = true, done_max = true}
for i = 2, #ARGV, 2 do
  if not allowed[ARGV[i]] then return redis.error_reply('dueq: unknown setting ' .. ARGV[i]) end
end
for i = 2, #ARGV, 2 do redis.call('HSET', meta, ARGV[i], ARGV[i + 1]) end
redis.call('PUBLISH', ARGV[1], int(now))
return {now}
