-- lifecycle: moves of a task between states shared by several operations: a failed attempt,
--   expiry, cancel of a scheduled task, dead-letter retry and delete, quarantine of an
--   unreadable record. Helpers take `K`, the queue's keys (keys.lua).

-- most scheduled tasks one call expires by the `expiry` index (claim, recover)
local EXPIRE_BATCH = 100

-- Moves a task whose record is unreadable to the dead-letter queue, record untouched.
local function quarantine(K, id, now)
  redis.call('ZADD', K.dead, now, id)
  redis.call('HSET', K.errors, id, 'unreadable task record')
  redis.call('HINCRBY', K.stats, 'dead_total', 1)
  hist_add(K.hist, now, 'd', 1)
end

-- One attempt of an active task failed (nack or expired lease). The lease is already
-- removed. Sets `K.woke` when the task's group became ready again.
-- Returns 1, due_at when the task was rescheduled, 2, 0 when it went to the dead-letter queue.
local function fail_attempt(K, channel, id, rec, now, retry_ms, permanent, err)
  local g = redis.call('HGET', K.groups, id)
  if g and gfinish(K, g, now) then K.woke = true end
  if not rec_ok(rec) then
    quarantine(K, id, now)
    return 2, 0
  end
  local attempt, max_attempts = rec_head(rec)
  if max_attempts == 0 then max_attempts = tonumber(redis.call('HGET', K.meta, 'max_attempts') or '5') or 5 end
  attempt = math.min(attempt + 1, MAX_ATTEMPT)
  redis.call('HINCRBY', K.stats, 'failed_total', 1)
  redis.call('HSET', K.errors, id, err)
  if permanent or attempt >= max_attempts then
    -- a dead task keeps its group (in `groups`), so a retry puts it back in it
    redis.call('HSET', K.tasks, id, rec_update(rec, attempt, nil))
    redis.call('ZADD', K.dead, now, id)
    release_key(K, rec, id, 'dead', now)
    dead_key_add(K.dead_keys, rec, id)
    redis.call('HINCRBY', K.stats, 'dead_total', 1)
    hist_add(K.hist, now, 'd', 1)
    trim(K.dead, K.tasks, K.errors, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'), K.groups,
      K.dead_keys)
    return 2, 0
  end
  local due = now + retry_ms
  if due > MAX_DUE_MS then due = MAX_DUE_MS end
  local before = earliest_due(K)
  redis.call('HSET', K.tasks, id, rec_update(rec, attempt, due))
  if g then
    gschedule(K, g, id, due, now, rec_prio(rec))
  else
    -- back into the set of its priority (its bit in meta `prio` was set when it was enqueued)
    redis.call('ZADD', K.s[rec_prio(rec)], due, id)
  end
  redis.call('HINCRBY', K.stats, 'retried_total', 1)
  hist_add(K.hist, now, 'r', 1)
  wake(channel, due, before)
  return 1, due
end

-- Ends scheduled task `id` (record `rec`, already out of its scheduled index) as expired:
-- dropped with its record and key, or kept in the dead-letter queue with the error
-- 'expired' when `to_dead`.
local function expire_task(K, id, rec, now, to_dead)
  redis.call('ZREM', K.expiry, id)
  release_key(K, rec, id, to_dead and 'dead' or 'expired', now)
  redis.call('HINCRBY', K.stats, 'expired_total', 1)
  if to_dead then
    -- a dead task keeps its group (in `groups`), so a retry puts it back in it
    redis.call('ZADD', K.dead, now, id)
    redis.call('HSET', K.errors, id, 'expired')
    dead_key_add(K.dead_keys, rec, id)
    trim(K.dead, K.tasks, K.errors, tonumber(redis.call('HGET', K.meta, 'dead_max') or '10000'), K.groups,
      K.dead_keys)
  else
    redis.call('HDEL', K.tasks, id)
    redis.call('HDEL', K.errors, id)
    redis.call('HDEL', K.groups, id)
  end
end

-- Expires up to EXPIRE_BATCH scheduled tasks whose expiry has passed, found by the `expiry`
-- index (never by a scan), taking each out of its scheduled set or group. An entry whose task
-- is not scheduled (a broken invariant, or a record deleted by hand) is only dropped.
-- Returns how many tasks expired and whether the batch was full (more may be waiting).
local function expire_due(K, now, to_dead)
  local ids = redis.call('ZRANGEBYSCORE', K.expiry, '-inf', now, 'LIMIT', 0, EXPIRE_BATCH)
  local n = #ids
  if n == 0 then return 0, false end
  local recs = hmget_chunked(K.tasks, ids)
  local groups = hmget_chunked(K.groups, ids)
  local gone = 0
  for i = 1, n do
    local id, rec, g = ids[i], recs[i], groups[i]
    local out_of_index = false
    if rec and rec_ok(rec) then
      if g then
        local d = redis.call('ZSCORE', K.gdue, id)
        if d then
          gunschedule(K, g, id, tonumber(d), rec_prio(rec))
          if not ghead(K, g) then redis.call('ZREM', K.gready, g) end
          out_of_index = true
        end
      else
        out_of_index = redis.call('ZREM', K.s[rec_prio(rec)], id) == 1
      end
    end
    if out_of_index then
      expire_task(K, id, rec, now, to_dead)
      gone = gone + 1
    else
      redis.call('ZREM', K.expiry, id)
    end
  end
  return gone, n == EXPIRE_BATCH
end

-- Removes task `id` (record `rec`) if it is scheduled, waiting in its priority's set or in
-- its group, as a cancel: record, error, key and expiry entry gone, counted in
-- `cancelled_total`. Given `now` (a cancel), a unique window of its key opens; without it (a
-- purge, a tick taken back) the key is free. Returns whether it was removed, and when the
-- window it opened ends (nil: none).
local function unschedule(K, id, rec, now)
  local p = rec and rec_ok(rec) and rec_prio(rec) or 0
  if redis.call('ZREM', K.s[p], id) == 0 then
    local gdue = redis.call('ZSCORE', K.gdue, id)
    if not gdue then return false end
    local g = redis.call('HGET', K.groups, id)
    if g then
      gunschedule(K, g, id, tonumber(gdue), p)
      if not ghead(K, g) then redis.call('ZREM', K.gready, g) end
    else
      redis.call('ZREM', K.gdue, id)
    end
    redis.call('HDEL', K.groups, id)
  end
  redis.call('ZREM', K.expiry, id)
  redis.call('HDEL', K.tasks, id)
  redis.call('HDEL', K.errors, id)
  local ends = rec and release_key(K, rec, id, now and 'cancelled', now)
  redis.call('HINCRBY', K.stats, 'cancelled_total', 1)
  return true, ends
end

-- Retries dead task `id` (record `rec`, readable): scheduled at `due` with a fresh attempt
-- count, back in its group or priority set, its key live again, with the unique window its
-- own window entry still names (once that entry is gone, the queue's `unique_for_ms`
-- setting). Returns 'retried', or 'conflict' (nothing changed) when its business key is live
-- on another task or in another task's unique window.
local function dead_retry_one(K, id, rec, due, now)
  local key = rec_key(rec)
  local holder = key ~= '' and key_id(redis.call('HGET', K.keys, key))
  if holder and holder ~= id then return 'conflict' end
  local w = nil
  if key ~= '' then
    local _, wid, _, ends, ww = window_read(redis.call('HGET', K.uniq, key))
    if wid == id then
      -- an ended window not dropped yet is no longer the task's
      if ends > now then w = ww end
      redis.call('HDEL', K.uniq, key)
      redis.call('ZREM', K.uniq_at, key)
    elseif wid and ends > now then
      return 'conflict'
    end
    if not w then w = tonumber(redis.call('HGET', K.meta, 'unique_for_ms') or '0') end
  end
  redis.call('ZREM', K.dead, id)
  dead_key_drop(K.dead_keys, rec, id, K.dead, K.tasks)
  redis.call('HSET', K.tasks, id, rec_update(rec, 0, due))
  -- attempts count afresh, so the old error goes too (a claim only looks for errors of
  -- tasks with attempts behind them)
  redis.call('HDEL', K.errors, id)
  local g = redis.call('HGET', K.groups, id)
  if g then
    gschedule(K, g, id, due, now, rec_prio(rec))
  else
    redis.call('ZADD', K.s[rec_prio(rec)], due, id)
  end
  if key ~= '' then redis.call('HSET', K.keys, key, key_entry(id, w)) end
  return 'retried'
end

-- Deletes dead task `id` (record `rec`, or false) for good.
local function dead_delete_one(K, id, rec)
  redis.call('ZREM', K.dead, id)
  dead_key_drop(K.dead_keys, rec, id, K.dead, K.tasks)
  redis.call('HDEL', K.tasks, id)
  redis.call('HDEL', K.errors, id)
  redis.call('HDEL', K.groups, id)
end
