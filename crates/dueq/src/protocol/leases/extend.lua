-- extend: pushes back the lease deadline of active tasks whose token is still current.
-- KEYS: queue_keys, Span::Leases (keys.rs)
-- ARGV[1] n, then per task: id, lease_token, lease_ms (new lease, counted from now)
-- Returns: {now_ms, then per task: new lease deadline (ms) | 0 lease_lost}
local K = queue_keys()
local active, leases = K.active, K.leases
local n = tonumber(ARGV[1])
local now = now_ms()
local out = {now}
for i = 1, n do
  local b = 1 + (i - 1) * 3
  local id, token, lease_ms = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local lv = redis.call('HGET', leases, id)
  local deadline = 0
  if lv and lease_split(lv) == token then
    deadline = now + lease_ms
    redis.call('ZADD', active, deadline, id)
    redis.call('HSET', leases, id, lease_moved(lv, deadline))
  end
  out[#out + 1] = deadline
end
return out
