-- claim: hands out up to `max` due tasks under a fresh lease each (FIFO among equal due times).
-- KEYS[1] sched  KEYS[2] active  KEYS[3] leases  KEYS[4] tasks  KEYS[5] meta  KEYS[6] claims
-- ARGV[1] max (0..1000; 0 only reports timing)  ARGV[2] lease_ms override (0 = each task's own)
-- ARGV[3] claim id ('' = untracked): remember what this call hands out, so that a caller that
--   never got the reply can ask for it again
-- ARGV[4] claim id to forget ('' = none): an earlier call whose reply did arrive
-- ARGV[5] r, ARGV[6..5+r] claim ids whose replies were lost: their tasks still leased under
--   the same token are handed out again first (new deadline, same token)
-- KEYS[7] errors  KEYS[8] dead  KEYS[9] stats  KEYS[10] hist
-- Returns: {now_ms, paused (0|1), next_due_ms (-1 = none), next_lease_deadline_ms (-1 = none),
--   orphans (1 when a lease has no deadline entry), then per task:
--   id, lease_token, due_at_ms, lease_deadline_ms, record, last error ('' = none)}
-- One lease token serves every task of a call: a token only has to differ between two claims
-- of the same task, and those are always different calls.
local sched, active, leases, tasks, meta, claims = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local errors = KEYS[7]
local K = {dead = KEYS[8], errors = KEYS[7], stats = KEYS[9], hist = KEYS[10]}
local max = tonumber(ARGV[1])
local override = tonumber(ARGV[2])
local claim_id, forget = ARGV[3], ARGV[4]
local now = now_ms()
local paused = redis.call('HGET', meta, 'paused') == '1'
local out = {now, paused and 1 or 0, -1, -1, 0}
-- explicit lengths: `#t` is a search in Lua 5.1, too slow in a per-task loop
local za, la, log = {}, {}, {}
local nz, no = 0, #out
-- made[token][lease_ms * 4 + flags] = {deadline, deadline string, lease value}
local made = {}

local function hand_out(id, token, rec, due)
  local attempt, _, lease_ms, klen = struct.unpack(HDR, rec)
  if override > 0 then lease_ms = override end
  local flags = (klen > 0 and 1 or 0) + (attempt > 0 and 2 or 0)
  local by_token = made[token]
  if not by_token then
    by_token = {}
    made[token] = by_token
  end
  local m = by_token[lease_ms * 4 + flags]
  if not m then
    local deadline = now + lease_ms
    local ds = int(deadline)
    m = {deadline, ds, token .. ' ' .. ds .. ' ' .. flags}
    by_token[lease_ms * 4 + flags] = m
  end
  za[nz + 1] = m[2]; za[nz + 2] = id
  la[nz + 1] = id; la[nz + 2] = m[3]
  log[nz + 1] = id; log[nz + 2] = token
  nz = nz + 2
  out[no + 1] = id
  out[no + 2] = token
  out[no + 3] = due
  out[no + 4] = m[1]
  out[no + 5] = rec
  out[no + 6] = attempt > 0 and (redis.call('HGET', errors, id) or '') or ''
  no = no + 6
end

if forget ~= '' then redis.call('HDEL', claims, forget) end
for i = 1, tonumber(ARGV[5]) do
  local lost = ARGV[5 + i]
  local entry = redis.call('HGET', claims, lost)
  if entry then
    redis.call('HDEL', claims, lost)
    -- entry: "<created ms> id token id token ..."
    local words = {}
    for w in string.gmatch(entry, '%S+') do words[#words + 1] = w end
    for j = 2, #words - 1, 2 do
      local id, token = words[j], words[j + 1]
      local lv = redis.call('HGET', leases, id)
      local rec = lv and lease_split(lv) == token and redis.call('HGET', tasks, id)
      if rec and rec_ok(rec) then
        local _, _, _, due = rec_head(rec)
        hand_out(id, token, rec, due)
      end
    end
  end
end

local room = max - #log / 2
-- the earliest due time decides whether to look further (an idle poll stops here)
local first = earliest(sched)
if not paused and room > 0 and first and first <= now then
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'WITHSCORES', 'LIMIT', 0, room)
  if #due > 0 then
    local ids = {}
    for i = 1, #due, 2 do ids[(i + 1) / 2] = due[i] end
    local recs = hmget_chunked(tasks, ids)
    -- the due ids are exactly the lowest-ranked members (score, then member order), so they
    -- go by rank from the head: O(log n + k) instead of k descents of a large skip list
    redis.call('ZREMRANGEBYRANK', sched, 0, #ids - 1)
    local token = int(redis.call('HINCRBY', meta, 'seq', 1))
    local fresh, late_sum, late_max = 0, 0, 0
    for j = 1, #ids do
      -- a missing record (hash entry deleted by hand) leaves nothing to run; an unreadable
      -- one goes to the dead-letter queue instead of stopping the queue
      if recs[j] and rec_ok(recs[j]) then
        local d = tonumber(due[2 * j])
        hand_out(ids[j], token, recs[j], d)
        fresh = fresh + 1
        late_sum = late_sum + (now - d)
        if now - d > late_max then late_max = now - d end
      elseif recs[j] then
        quarantine(K, ids[j], now)
      end
    end
    if fresh > 0 then
      -- the first claim of a minute also drops minutes older than the hour kept
      if hist_add(K.hist, now, 'c', fresh) == fresh then hist_trim(K.hist, now) end
      hist_add(K.hist, now, 'l', late_sum)
      local xf = int(math.floor(now / 60000)) .. ':x'
      if late_max > (tonumber(redis.call('HGET', K.hist, xf)) or -1) then
        redis.call('HSET', K.hist, xf, int(late_max))
      end
    end
    first = earliest(sched)
  end
end

if #za > 0 then
  chunked('ZADD', active, za)
  chunked('HSET', leases, la)
  if claim_id ~= '' then
    redis.call('HSET', claims, claim_id, int(now) .. ' ' .. table.concat(log, ' '))
  end
end
out[3] = first or -1
out[4] = earliest(active) or -1
if redis.call('HLEN', leases) ~= redis.call('ZCARD', active) then out[5] = 1 end
return out
