-- worker_remove: removes one worker's entry at once (its graceful shutdown).
-- KEYS: global_key('workers'): dueq:workers (hash, as in worker_beat)
-- ARGV[1] worker id
-- Returns: {now_ms, 1 if an entry was removed else 0}
local now = now_ms()
return {now, redis.call('HDEL', global_key('workers').workers, ARGV[1])}
