-- release: hands leases back unfinished (graceful shutdown): the task is due again at once,
-- at its old due time, and the attempt is not counted.
-- KEYS[1] sched  KEYS[2] active  KEYS[3] leases  KEYS[4] tasks  KEYS[5] meta  KEYS[6] stats
-- KEYS[7..15] group keys, KEYS[16..25] option keys (see lib/)
-- ARGV[1] wake channel, ARGV[2] n, then per task: id, lease_token
-- Returns: {now_ms, then per task: 1 released | 0 lease_lost}
local sched, active, leases, tasks = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local meta, stats = KEYS[5], KEYS[6]
local G = group_keys(7)
G.meta = meta
local O = option_keys(16)
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local now = now_ms()
local out = {now}
local before = earliest_due(sched, G)
local soonest = nil
local wake_up = at_concurrency(meta, active)
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
    local g = redis.call('HGET', G.groups, id)
    if g then
      if gfinish(G, g, now, stats) then wake_up = true end
      gschedule(G, g, id, due, now, rec_prio(rec))
    else
      redis.call('ZADD', O.s[rec_prio(rec)], due, id)
    end
    if soonest == nil or due < soonest then soonest = due end
    ok = 1
  end
  out[#out + 1] = ok
end
if wake_up then
  redis.call('PUBLISH', channel, int(now))
elseif soonest ~= nil then
  wake(channel, math.max(soonest, now), before)
end
return out
