-- limits: the queue's concurrency limit and the sliding-window rate limits (queue and
--   groups).

-- Whether the queue is at its concurrency limit, so that a task leaving `active` frees a slot
-- a throttled claimer waits for.
-- `limit`: the queue's `concurrency` setting when the caller has read it already.
local function at_concurrency(K, limit)
  local c = limit or tonumber(redis.call('HGET', K.meta, 'concurrency') or '0') or 0
  return c > 0 and active_count(K) >= c
end

-- Sliding-window rate limits on the Redis clock. Each limit owner ('' for the queue, else a
-- group) has a log in `rate` (sorted set, every score 0, member = owner prefix, big-endian
-- claim time, running total of tasks taken), one entry per claim that took tasks, and
-- `rate_n` (owner -> "total floor [held]", floor = the running total of the newest entry that
-- left the window; held = since when a group has been held back by its full window), so the
-- count in the window is total - floor, found in O(log n). `rate_idle`
-- (owner prefix -> time of its newest entry) lets claims drop logs nobody adds to.
-- Returns the room left now, and when it is 0 the instant the next slot opens; `st` is
-- passed on to rate_take.
local function rate_room(K, owner, max, per_ms, now)
  local p = gprefix(owner)
  local st = {p = p, owner = owner, total = 0, floor = 0}
  local v = redis.call('HGET', K.rate_n, owner)
  if not v then return max, nil, st end
  local total, floor, held = string.match(v, '^(%d+) (%d+) ?(%d*)$')
  st.total, st.floor, st.held = tonumber(total) or 0, tonumber(floor) or 0, tonumber(held)
  -- entries at or before now - per_ms are out of the window
  local hi = '(' .. p .. be6(math.max(now - per_ms + 1, 0))
  local last = redis.call('ZREVRANGEBYLEX', K.rate, hi, '[' .. p, 'LIMIT', 0, 1)
  if last[1] then
    st.floor = struct.unpack('>I6', last[1], #p + 7)
    redis.call('ZREMRANGEBYLEX', K.rate, '[' .. p, hi)
    redis.call('HSET', K.rate_n, owner, int(st.total) .. ' ' .. int(st.floor)
      .. (st.held and (' ' .. int(st.held)) or ''))
  end
  local room = max - (st.total - st.floor)
  if room > 0 then return room, nil, st end
  local first = redis.call('ZRANGEBYLEX', K.rate, '[' .. p, '(' .. p .. '\255', 'LIMIT', 0, 1)
  if not first[1] then return 1, nil, st end
  return 0, struct.unpack('>I6', first[1], #p + 1) + per_ms, st
end

-- Marks the owner of `st` held back by its full window since now (unless it already is).
local function rate_hold(K, st, now)
  if st.held then return end
  st.held = now
  redis.call('HSET', K.rate_n, st.owner, int(st.total) .. ' ' .. int(st.floor) .. ' ' .. int(now))
end

-- Logs `n` tasks taken now against the limit whose state rate_room returned (and ends a
-- hold).
local function rate_take(K, st, n, now)
  st.total = st.total + n
  redis.call('ZADD', K.rate, 0, st.p .. be6(now) .. be6(st.total))
  redis.call('HSET', K.rate_n, st.owner, int(st.total) .. ' ' .. int(st.floor))
  redis.call('ZADD', K.rate_idle, now, st.p)
end

-- Drops up to `count` (default 10) logs whose newest entry is at or before `before` (their
-- window is empty).
local function rate_forget(K, before, count)
  local old = redis.call('ZRANGEBYSCORE', K.rate_idle, '-inf', before, 'LIMIT', 0, count or 10)
  for i = 1, #old do
    local p = old[i]
    redis.call('ZREMRANGEBYLEX', K.rate, '[' .. p, '(' .. p .. '\255')
    redis.call('HDEL', K.rate_n, string.sub(p, 3))
    redis.call('ZREM', K.rate_idle, p)
  end
end
