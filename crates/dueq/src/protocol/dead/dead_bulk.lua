-- dead_bulk: retries, deletes or only counts the dead tasks that match a filter, one slice of
--   the dead-letter queue a call (in order of death, oldest first), so a call's work stays
--   bounded however large the queue is; the caller calls again with the cursor it returns.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] action ('retry' | 'delete' | 'count'), ARGV[2] wake channel
-- ARGV[3] at: the death time (ms) to go on from, ARGV[4] skip: how many dead tasks of that
--   very death time earlier calls looked at and left (they come first in its order)
-- ARGV[5] before: deaths at or after this are left out (ms; -1: the first call takes the
--   millisecond after now)
-- ARGV[6] scan (dead tasks to look at, 1..1000)  ARGV[7] limit (most to act on in this call)
-- ARGV[8] error_contains ('' = any)  ARGV[9] key_prefix ('' = any)  ARGV[10] group (''= any)
-- ARGV[11] spread_ms (retry: each task due at now + a fixed share of it, by a hash of its id)
-- Returns: {now_ms, next at (-1 when the queue was looked at to the end), next skip, before,
--   looked at, matched, done (retried or deleted), conflicts (retry refused: the key is live
--   again)}
-- Tasks of one death time are in id order, and those a call acts on leave the queue, so the
-- ones it left are the first of their time: the next call skips that many.
local K = queue_keys()
local now = now_ms()
local action = ARGV[1]
local at, skip, before = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if before < 0 then before = now + 1 end
local scan, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local err_has, prefix, group = ARGV[8], ARGV[9], ARGV[10]
local spread = tonumber(ARGV[11])

local page = redis.call('ZRANGE', K.dead, int(at), '(' .. int(before), 'BYSCORE', 'WITHSCORES',
  'LIMIT', skip, scan)
local ids, scores, n = {}, {}, 0
for i = 1, #page, 2 do
  n = n + 1
  ids[n], scores[n] = page[i], tonumber(page[i + 1])
end

local recs = hmget_chunked(K.tasks, ids)
local errs = err_has ~= '' and hmget_chunked(K.errors, ids)
local groups = group ~= '' and hmget_chunked(K.groups, ids)
local matched, done, conflicts = 0, 0, 0
-- whether each task left the dead-letter queue in this call
local gone = {}
local before_due = action == 'retry' and earliest_due(K)
for i = 1, n do
  local id, rec = ids[i], recs[i]
  local ok = true
  if errs then ok = errs[i] and string.find(errs[i], err_has, 1, true) ~= nil end
  if ok and groups then ok = groups[i] == group end
  if ok and prefix ~= '' then
    ok = rec and rec_ok(rec) and string.sub(rec_key(rec), 1, #prefix) == prefix
  end
  if ok then
    matched = matched + 1
    if action ~= 'count' and done + conflicts < limit then
      if action == 'delete' then
        dead_delete_one(K, id, rec)
        done = done + 1
        gone[i] = true
      elseif rec and rec_ok(rec) then
        local due = now
        if spread > 0 then due = now + tonumber(string.sub(redis.sha1hex(id), 1, 8), 16) % spread end
        if dead_retry_one(K, id, rec, due, now) == 'retried' then
          done = done + 1
          gone[i] = true
        else
          conflicts = conflicts + 1
        end
      end
    end
  end
end
if done > 0 and action == 'retry' then wake(ARGV[2], now, before_due) end
-- the next call goes on at the last death time looked at, past what this call left of it
local next_at, next_skip = -1, 0
if n == scan then
  next_at = scores[n]
  if next_at == at then next_skip = skip end
  for i = 1, n do
    if scores[i] == next_at and not gone[i] then next_skip = next_skip + 1 end
  end
end
return {now, next_at, next_skip, before, n, matched, done, conflicts}
