-- recover: returns tasks whose lease expired to scheduled (after a backoff) or to the
-- dead-letter queue, counting the attempt; also finds leases whose deadline entry was lost,
-- forgets claim records (see claim.lua) of callers gone for over an hour, drops idle
-- rate-limit logs, and expires up to 100 scheduled tasks whose expiry passed (by the `expiry`
-- index; dropped, or dead-lettered when the queue's `on_expire` is 'dead'), and drops up to
-- 100 unique windows that ended (windows.lua).
-- KEYS: queue_keys, Span::Claims (keys.rs)
-- ARGV[1] wake channel, ARGV[2] max (tasks per call), ARGV[3] m, ARGV[4..3+m] backoff (ms)
--   after attempt 1, 2, ..., m (later attempts use the last value)
-- Returns: {now_ms, recovered, dead, next_lease_deadline_ms (-1 = none), swept (1 when the
--   sweep of the leases hash came back to its start during this call), expired (tasks
--   expired), more_expired (1 when the expiry batch was full, of tasks or of ended windows:
--   call again), next_expiry_ms (earliest expiry of a scheduled task or end of a unique
--   window, -1 = none)}
local K = queue_keys()
local active, leases, claims = K.active, K.leases, K.claims
local channel = ARGV[1]
local max = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
local now = now_ms()

local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, max)
local pick = {}
local nexp = #expired
for i = 1, #expired do pick[expired[i]] = true end

-- A lease whose `active` entry is gone would never expire: sweep the leases hash a slice at a
-- time (it holds only active tasks, so it is small) and treat such leases by their own deadline.
-- Up to 10 slices of 100 per call, so a caller can finish a sweep of thousands of leases in a
-- few calls.
local stored_cursor = redis.call('HGET', K.meta, 'sweep_cursor') or '0'
local cursor = stored_cursor
local swept = 0
-- the earliest deadline of an orphaned lease not yet due, so the caller comes back for it
local orphan_next = nil
for _ = 1, 10 do
  local scan = redis.call('HSCAN', leases, cursor, 'COUNT', 100)
  cursor = scan[1]
  for i = 1, #scan[2], 2 do
    local id = scan[2][i]
    if id ~= PIN and not pick[id] and nexp < max and not redis.call('ZSCORE', active, id) then
      local _, deadline = lease_split(scan[2][i + 1])
      if deadline <= now then
        nexp = nexp + 1
        expired[nexp] = id
        pick[id] = true
      elseif orphan_next == nil or deadline < orphan_next then
        orphan_next = deadline
      end
    end
  end
  if cursor == '0' then
    swept = 1
    break
  end
end
-- written only when it moved, so a call on an idle queue writes nothing (no AOF traffic)
if cursor ~= stored_cursor then redis.call('HSET', K.meta, 'sweep_cursor', cursor) end

-- claim records are forgotten by their caller's next claim; one left by a caller that died
-- is dropped after an hour (its leases expire long before)
local ccursor = redis.call('HGET', K.meta, 'claims_cursor') or '0'
local cscan = redis.call('HSCAN', claims, ccursor, 'COUNT', 20)
if cscan[1] ~= ccursor then redis.call('HSET', K.meta, 'claims_cursor', cscan[1]) end
for i = 1, #cscan[2], 2 do
  local created = tonumber(string.match(cscan[2][i + 1], '^%d+') or '0')
  if now - created > 3600000 then redis.call('HDEL', claims, cscan[2][i]) end
end

local recovered, dead = 0, 0
local wake_up = #expired > 0 and at_concurrency(K)
for i = 1, #expired do
  local id = expired[i]
  redis.call('ZREM', active, id)
  redis.call('HDEL', leases, id)
  local rec = redis.call('HGET', K.tasks, id)
  if rec then
    local attempt = rec_ok(rec) and rec_head(rec) + 1 or 1
    local delay = tonumber(ARGV[3 + math.min(attempt, m)] or '0')
    local code = fail_attempt(K, channel, id, rec, now, delay, false, 'lease expired')
    if code == 2 then dead = dead + 1 else recovered = recovered + 1 end
  end
end
if #expired > 0 then
  active_unpin(K)
  redis.call('HINCRBY', K.stats, 'lease_expired_total', #expired)
end
if wake_up or K.woke then redis.call('PUBLISH', channel, int(now)) end
-- rate logs nobody added to for a window go here too, so an idle queue keeps none
local per = redis.call('HMGET', K.meta, 'rate_per_ms', 'group_rate_per_ms', 'exp', 'on_expire')
local nexpired, more = 0, false
if per[3] then nexpired, more = expire_due(K, now, per[4] == 'dead') end
local window = math.max(tonumber(per[1] or '0') or 0, tonumber(per[2] or '0') or 0)
if window > 0 then rate_forget(K, now - window, 100) end
local next_deadline = active_earliest(K)
if orphan_next and (next_deadline == nil or orphan_next < next_deadline) then
  next_deadline = orphan_next
end
local next_expiry = nil
if per[3] then next_expiry = earliest(K.expiry) end
if windows_drop(K, now, EXPIRE_BATCH) == EXPIRE_BATCH then more = true end
local next_end = earliest(K.uniq_at)
if next_end and (next_expiry == nil or next_end < next_expiry) then next_expiry = next_end end
return {now, recovered, dead, next_deadline or -1, swept, nexpired, more and 1 or 0,
  next_expiry or -1}
