-- release: hands leases back unfinished (graceful shutdown): the task is due again at once,
-- at its old due time, and the attempt is not counted.
-- KEYS: queue_keys, Span::Scheduled (keys.rs)
-- ARGV[1] wake channel, ARGV[2] n, then per task: id, lease_token
-- Returns: {now_ms, then per task: 1 released | 0 lease_lost}
local K = queue_keys()
local active, leases, tasks = K.active, K.leases, K.tasks
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local now = now_ms()
local out = {now}
local before = earliest_due(K)
local soonest = nil
local wake_up = at_concurrency(K)
for i = 1, n do
  local id, token = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local lv = redis.call('HGET', leases, id)
  local ok = 0
  -- read the record first: one that is missing or unreadable keeps its lease (recovery then
  -- dead-letters it) instead of leaving the task in no set at all
  local rec = lv and lease_split(lv) == token and redis.call('HGET', tasks, id)
  if rec and rec_ok(rec) then
    redis.call('ZREM', active, id)
    redis.call('HDEL', leases, id)
    local _, _, _, due = rec_head(rec)
    -- a tick's task handed back has started: it is no longer judged by its misfire deadline
    if rec_misfire(rec) then redis.call('HSET', tasks, id, rec_update(rec, nil, nil)) end
    local g = redis.call('HGET', K.groups, id)
    if g then
      if gfinish(K, g, now) then wake_up = true end
      gschedule(K, g, id, due, now, rec_prio(rec))
    else
      redis.call('ZADD', K.s[rec_prio(rec)], due, id)
    end
    if soonest == nil or due < soonest then soonest = due end
    ok = 1
  end
  out[#out + 1] = ok
end
active_unpin(K)
if wake_up then
  redis.call('PUBLISH', channel, int(now))
elseif soonest ~= nil then
  wake(channel, math.max(soonest, now), before)
end
return out
