-- browse: one page of scheduled tasks in due order, or of active tasks in lease-deadline order, after a cursor.
-- KEYS: queue_keys, Span::Scheduled (keys.rs)
-- ARGV[1] state ('scheduled' | 'active'), ARGV[2] cursor score (-1 = from the start),
-- ARGV[3] cursor id ('' = none), ARGV[4] limit (1..1000)
-- Returns: {now_ms, the queue's max_attempts, the queue's lease_ms, n, then per task: id,
--   score (due time, or lease deadline), record, group ('' = none), last error ('' = none),
--   expires_at_ms (-1 = none), claimed_at_ms (-1 = unknown or not active), the holding worker
--   ('' = unnamed or not active)}
-- Order: (score, id) over every set holding such tasks (each priority's set and the groups'
-- `gdue` for scheduled, `active` for active), so ungrouped and grouped tasks of all
-- priorities come in one due-time order. Each set is read from the cursor on, at most `limit`
-- entries, from the cursor task's rank + 1 when it is still in the set, else from the first
-- entry after (score, id), found by halving the rank range of the entries with that score.
-- O(sets x (log^2 n + limit)), never a scan.
local K = queue_keys()
local active, tasks, meta, errors, gdue, groups = K.active, K.tasks, K.meta, K.errors, K.gdue,
  K.groups
local now = now_ms()
local state = ARGV[1]
local as, aid = tonumber(ARGV[2]), ARGV[3]
local limit = tonumber(ARGV[4])

local sets = {}
if state == 'active' then
  sets[1] = active
else
  local pl, pn = prios_of(redis.call('HGET', meta, 'prio'))
  for i = 1, pn do sets[i] = K.s[pl[i]] end
  sets[pn + 1] = gdue
end

-- candidates: {score, id}, at most `limit` from each set
local cand, nc = {}, 0
for i = 1, #sets do
  local set = sets[i]
  local start = 0
  if as >= 0 then
    local s = aid ~= '' and redis.call('ZSCORE', set, aid)
    if s and tonumber(s) == as then
      start = redis.call('ZRANK', set, aid) + 1
    else
      -- the cursor's task left: among the entries with its score (they sort by id), find
      -- the first id after it by halving the rank range
      local lo = redis.call('ZCOUNT', set, '-inf', '(' .. int(as))
      local hi = redis.call('ZCOUNT', set, '-inf', int(as))
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if redis.call('ZRANGE', set, mid, mid)[1] > aid then hi = mid else lo = mid + 1 end
      end
      start = lo
    end
  end
  local r = redis.call('ZRANGE', set, start, start + limit - 1, 'WITHSCORES')
  for j = 1, #r, 2 do
    if r[j] ~= PIN then
      nc = nc + 1
      cand[nc] = {tonumber(r[j + 1]), r[j]}
    end
  end
end

table.sort(cand, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
local ids, scores, n = {}, {}, 0
for i = 1, nc do
  if n >= limit then break end
  local c = cand[i]
  n = n + 1
  scores[n], ids[n] = c[1], c[2]
end

local d = redis.call('HMGET', meta, 'max_attempts', 'lease_ms')
local out = {now, d[1] or '5', d[2] or '30000', 0}
if n == 0 then return out end
local recs = redis.call('HMGET', tasks, unpack(ids))
local gs = redis.call('HMGET', groups, unpack(ids))
local errs = redis.call('HMGET', errors, unpack(ids))
local exps = state ~= 'active' and redis.call('ZMSCORE', K.expiry, unpack(ids))
local lvs = state == 'active' and redis.call('HMGET', K.leases, unpack(ids))
local m, o = 0, 4
for i = 1, n do
  -- a task whose record is gone (deleted by hand) or unreadable is left out
  if recs[i] and rec_ok(recs[i]) then
    m = m + 1
    out[o + 1] = ids[i]
    out[o + 2] = scores[i]
    out[o + 3] = recs[i]
    out[o + 4] = gs[i] or ''
    out[o + 5] = errs[i] or ''
    out[o + 6] = exps and exps[i] and tonumber(exps[i]) or -1
    local at, holder
    if lvs and lvs[i] then
      local _, _, _, _, _, a, h = lease_split(lvs[i])
      at, holder = a, h
    end
    out[o + 7] = at or -1
    out[o + 8] = holder or ''
    o = o + 8
  end
end
out[4] = m
return out
