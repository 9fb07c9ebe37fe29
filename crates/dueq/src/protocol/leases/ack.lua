-- ack: completes active tasks whose lease token is still current (fencing).
-- KEYS: queue_keys, Span::Finish (keys.rs)
-- ARGV[1] wake channel (told when a slot under a concurrency limit frees up), ARGV[2] n,
--   then per task: id, lease_token
-- Returns: {now_ms, then per task: 1 acknowledged | 0 lease_lost}
-- a local for the per-task loop: a global is a table lookup per use in Lua 5.1
local ARGV = ARGV
local K = queue_keys()
local active, leases, tasks, keys, done, stats, meta, errors, hist = K.active, K.leases,
  K.tasks, K.keys, K.done, K.stats, K.meta, K.errors, K.hist
local n = tonumber(ARGV[2])
local now = now_ms()
local out = {now}
local ids = {}
for i = 1, n do ids[i] = ARGV[1 + 2 * i] end
local lvs = hmget_chunked(leases, ids)
local cfg = redis.call('HMGET', meta, 'done_max', 'concurrency', 'gprio')
-- the priorities grouped tasks use, for a parked group's head (gfinish)
K.pl, K.pn = prios_of(cfg[3])
local keep = tonumber(cfg[1] or '0')
local conc = tonumber(cfg[2] or '0') or 0
-- lease values repeat across a batch (one token per claim call): split each once
local split = {}
local seen, okids, keyed, failed, grouped = {}, {}, {}, {}, {}
-- explicit lengths: `#t` is a search in Lua 5.1, too slow in a per-task loop
local nok, nkeyed, nfailed, ngrouped = 0, 0, 0, 0

for i = 1, n do
  local id, lv = ids[i], lvs[i]
  local ok = 0
  if lv and not seen[id] then
    local s = split[lv]
    if not s then
      local token, _, k, f, g, at = lease_split(lv)
      local run = at and math.max(now - at, 0)
      -- [7]: tasks acked under this lease value, for the run time histogram
      s = {token, k, f, g, run and bucket(RUN_BOUNDS, run), run, 0}
      split[lv] = s
    end
    if s[1] == ARGV[2 * i + 2] then
      seen[id] = true
      ok = 1
      nok = nok + 1
      okids[nok] = id
      -- the record is read only when there is a key to release or a record to keep
      if s[2] or keep > 0 then
        nkeyed = nkeyed + 1
        keyed[nkeyed] = id
      end
      if s[3] then
        nfailed = nfailed + 1
        failed[nfailed] = id
      end
      if s[4] then
        ngrouped = ngrouped + 1
        grouped[ngrouped] = id
      end
      s[7] = s[7] + 1
    end
  end
  out[i + 1] = ok
end
if nok > 0 then
  local wake_up = at_concurrency(K, conc)
  chunked('ZREM', active, okids)
  if ngrouped > 0 then
    local gs = hmget_chunked(K.groups, grouped)
    local per = {}
    for j = 1, ngrouped do
      if gs[j] then per[gs[j]] = (per[gs[j]] or 0) + 1 end
    end
    for g, count in pairs(per) do
      if gfinish(K, g, now, count) then wake_up = true end
    end
    -- a task kept as succeeded keeps its group (as a dead one does) until trim drops it
    if keep == 0 then chunked('HDEL', K.groups, grouped) end
  end
  if wake_up then redis.call('PUBLISH', ARGV[1], int(now)) end
  chunked('HDEL', leases, okids)
  active_unpin(K)
  local recs = hmget_chunked(tasks, keyed)
  local dargs = {}
  local kept = {}
  for j = 1, #keyed do
    local rec = recs[j]
    if rec then
      release_key(K, rec, keyed[j], 'succeeded', now)
      if keep > 0 and rec_ok(rec) then
        local attempt = rec_head(rec)
        redis.call('HSET', tasks, keyed[j], rec_update(rec, math.min(attempt + 1, MAX_ATTEMPT), nil))
        dargs[#dargs + 1] = now; dargs[#dargs + 1] = keyed[j]
        kept[keyed[j]] = true
      end
    end
  end
  if keep > 0 then
    -- the group entries of grouped tasks not kept (no readable record) go now
    local drop, nd = {}, 0
    for j = 1, ngrouped do
      if not kept[grouped[j]] then
        nd = nd + 1
        drop[nd] = grouped[j]
      end
    end
    if nd > 0 then chunked('HDEL', K.groups, drop) end
    chunked('ZADD', done, dargs)
    trim(done, tasks, errors, keep, K.groups)
  else
    chunked('HDEL', tasks, okids)
    chunked('HDEL', errors, failed)
    -- retention was turned off: let go of what it kept, a slice per call
    if redis.call('EXISTS', done) == 1 then trim(done, tasks, errors, 0, K.groups) end
  end
  redis.call('HINCRBY', stats, 'succeeded_total', #okids)
  -- run times: one per lease value (the tasks of one claim share it)
  local run_n, run_sum, timed = {}, 0, false
  for _, v in pairs(split) do
    if v[5] and v[7] > 0 then
      run_n[v[5]] = (run_n[v[5]] or 0) + v[7]
      run_sum = run_sum + v[6] * v[7]
      timed = true
    end
  end
  if timed then timings_add(stats, 'run_time', run_n, run_sum) end
  hist_add(hist, now, 's', #okids)
end
return out
