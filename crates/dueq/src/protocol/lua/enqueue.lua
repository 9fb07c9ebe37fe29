-- enqueue: adds a batch of tasks; a live business key keeps (or replaces) its task.
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] leases
-- ARGV[1] wake channel
-- ARGV[2] n (tasks in this batch), then 7 values per task:
--   key ('' = none), on_conflict ('keep'|'replace'), due kind ('at'|'delay'), due value (ms),
--   max_attempts, lease_ms, payload
-- Returns: {'ok', now_ms, then per task: code, id, due_at_ms}
--   code 1 created, 0 existing task kept, 2 existing task replaced, -1 in_progress (replace refused)
--   or {'bad_due', now_ms, index} when a due time lands past year 9999 (nothing written)
local sched, tasks, keys, meta, stats, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local now = now_ms()

local dues = {}
for i = 1, n do
  local b = 2 + (i - 1) * 7
  local v = tonumber(ARGV[b + 4])
  local due = v
  if ARGV[b + 3] == 'delay' then due = now + v end
  if due > MAX_DUE_MS or due < 0 then return {'bad_due', now, i} end
  dues[i] = due
end

local before = earliest(sched)
local first = redis.call('HINCRBY', meta, 'seq', n) - n
local hargs, zargs = {}, {}
-- tasks created earlier in this batch, by key: position of their values in hargs/zargs
local fresh = {}
local out = {'ok', now}
local created, soonest = 0, nil

for i = 1, n do
  local b = 2 + (i - 1) * 7
  local key, mode = ARGV[b + 1], ARGV[b + 2]
  local max_attempts, lease_ms, payload = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), ARGV[b + 7]
  local due = dues[i]
  local done = false
  if key ~= '' then
    local f = fresh[key]
    if f then
      if mode == 'replace' then
        hargs[f.h + 1] = rec_pack(0, max_attempts, lease_ms, due, now, key, '', payload)
        zargs[f.z] = due
        f.due = due
        if soonest == nil or due < soonest then soonest = due end
        out[#out + 1] = 2; out[#out + 1] = f.id; out[#out + 1] = due
      else
        out[#out + 1] = 0; out[#out + 1] = f.id; out[#out + 1] = f.due
      end
      done = true
    else
      local existing = redis.call('HGET', keys, key)
      if existing then
        local score = redis.call('ZSCORE', sched, existing)
        local rec = redis.call('HGET', tasks, existing)
        local active = redis.call('HEXISTS', leases, existing) == 1
        if rec and (score or active) then
          if mode == 'replace' and active then
            out[#out + 1] = -1; out[#out + 1] = existing; out[#out + 1] = 0
          elseif mode == 'replace' then
            local attempt, _, _, _, created_at = rec_head(rec)
            redis.call('HSET', tasks, existing,
              rec_pack(attempt, max_attempts, lease_ms, due, created_at, key, '', payload))
            redis.call('ZADD', sched, due, existing)
            if soonest == nil or due < soonest then soonest = due end
            out[#out + 1] = 2; out[#out + 1] = existing; out[#out + 1] = due
          else
            local _, _, _, rdue = rec_head(rec)
            out[#out + 1] = 0; out[#out + 1] = existing; out[#out + 1] = tonumber(score or rdue)
          end
          done = true
        end
        -- otherwise the index entry is stale (its task is gone): fall through and create
      end
    end
  end
  if not done then
    local id = string.format('%012x', first + i)
    hargs[#hargs + 1] = id
    hargs[#hargs + 1] = rec_pack(0, max_attempts, lease_ms, due, now, key, '', payload)
    zargs[#zargs + 1] = due
    zargs[#zargs + 1] = id
    if key ~= '' then
      redis.call('HSET', keys, key, id)
      fresh[key] = {id = id, h = #hargs - 1, z = #zargs - 1, due = due}
    end
    created = created + 1
    if soonest == nil or due < soonest then soonest = due end
    out[#out + 1] = 1; out[#out + 1] = id; out[#out + 1] = due
  end
end

if #hargs > 0 then
  chunked('HSET', tasks, hargs)
  chunked('ZADD', sched, zargs)
end
if created > 0 then redis.call('HINCRBY', stats, 'enqueued_total', created) end
if soonest ~= nil then wake(channel, soonest, before) end
return out
