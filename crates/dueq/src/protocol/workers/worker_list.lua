-- worker_list: the live workers (entries whose heartbeat has not expired by the Redis clock).
-- KEYS: global_key('workers'): dueq:workers (hash, as in worker_beat; at most its cap of
--   entries)
-- ARGV: none
-- Returns: {now_ms, then worker id, entry per live worker}
-- Read-only: expired entries are skipped here and deleted by later beats.
local now = now_ms()
local all = redis.call('HGETALL', global_key('workers').workers)
local out, n = {now}, 1
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^%d+ (%d+) '))
  if exp and exp > now then
    out[n + 1] = all[i]; out[n + 2] = all[i + 1]; n = n + 2
  end
end
return out
