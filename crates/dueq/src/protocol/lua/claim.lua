-- claim: hands out up to `max` due tasks under a fresh lease each (FIFO among equal due times).
-- KEYS[1] sched  KEYS[2] active  KEYS[3] leases  KEYS[4] tasks  KEYS[5] meta
-- ARGV[1] max (0..1000; 0 only reports timing)  ARGV[2] lease_ms override (0 = each task's own)
-- Returns: {now_ms, paused (0|1), next_due_ms (-1 = none), next_lease_deadline_ms (-1 = none),
--   orphans (1 when a lease has no deadline entry), then per task:
--   id, lease_token, attempt (1-based, this one), due_at_ms, lease_deadline_ms, record}
local sched, active, leases, tasks, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local max = tonumber(ARGV[1])
local override = tonumber(ARGV[2])
local now = now_ms()
local paused = redis.call('HGET', meta, 'paused') == '1'
local out = {now, paused and 1 or 0, -1, -1, 0}

if not paused and max > 0 then
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
  if #due > 0 then
    local ids, scores = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
      scores[#scores + 1] = due[i + 1]
    end
    chunked('ZREM', sched, ids)
    local recs = hmget_chunked(tasks, ids)
    local base = redis.call('HINCRBY', meta, 'seq', #ids) - #ids
    local za, la = {}, {}
    for j = 1, #ids do
      local rec = recs[j]
      -- a record missing here means the hash entry was deleted by hand: nothing to run
      if rec then
        local id = ids[j]
        local attempt, _, lease_ms = rec_head(rec)
        if override > 0 then lease_ms = override end
        local deadline = now + lease_ms
        local token = int(base + j)
        za[#za + 1] = deadline; za[#za + 1] = id
        la[#la + 1] = id; la[#la + 1] = token .. ' ' .. int(deadline)
        out[#out + 1] = id
        out[#out + 1] = token
        out[#out + 1] = math.min(attempt + 1, MAX_ATTEMPT)
        out[#out + 1] = tonumber(scores[j])
        out[#out + 1] = deadline
        out[#out + 1] = rec
      end
    end
    if #za > 0 then
      chunked('ZADD', active, za)
      chunked('HSET', leases, la)
    end
  end
end

out[3] = earliest(sched) or -1
out[4] = earliest(active) or -1
if redis.call('HLEN', leases) ~= redis.call('ZCARD', active) then out[5] = 1 end
return out
