-- worker_remove: removes one worker's entry at once (its graceful shutdown).
-- KEYS[1] workers (hash, as in worker_beat)
-- ARGV[1] worker id
-- Returns: {now_ms, 1 if an entry was removed else 0}
local now = now_ms()
return {now, redis.call('HDEL', KEYS[1], ARGV[1])}
