-- enqueue: adds a batch of tasks; a live business key keeps (or replaces) its task.
-- KEYS[1] sched  KEYS[2] tasks  KEYS[3] keys  KEYS[4] meta  KEYS[5] stats  KEYS[6] leases
-- KEYS[7..15] group keys (see lib.lua)
-- ARGV[1] wake channel
-- ARGV[2] n (tasks in this batch), ARGV[3] values per task (4, or 5 when a task of the batch
--   has a group), then per task:
--   key ('' = none); mode: on_conflict ('k' keep | 'r' replace) followed by due kind ('a' at |
--   'd' delay), e.g. 'kd'; due value (ms); spec (the record without its tail, see lib.lua);
--   group (5th value; '' = none; a replace keeps the task's group)
-- Returns: {'ok', now_ms, then per task: code, id, due_at_ms}
--   code 1 created, 0 existing task kept, 2 existing task replaced, -1 in_progress (replace refused)
--   or {'bad_due', now_ms, index} when a due time lands past year 9999 (nothing written)
local sched, tasks, keys, meta, stats, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G = group_keys(7)
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local stride = tonumber(ARGV[3])
local now = now_ms()
local created_at = struct.pack('<I6', now)

-- Due times as numbers and as score strings; a delay shared by many tasks is computed once.
local dues, due_str, due_bin, by_delay = {}, {}, {}, {}
for i = 1, n do
  local b = 3 + (i - 1) * stride
  local v = ARGV[b + 3]
  if string.byte(ARGV[b + 2], 2) == 100 then -- 'd': delay
    local c = by_delay[v]
    if not c then
      local due = now + tonumber(v)
      c = {due, int(due), struct.pack('<I6', due)}
      by_delay[v] = c
    end
    dues[i], due_str[i], due_bin[i] = c[1], c[2], c[3]
  else
    dues[i], due_str[i] = tonumber(v), v
    due_bin[i] = struct.pack('<I6', dues[i])
  end
  if dues[i] > MAX_DUE_MS or dues[i] < 0 then return {'bad_due', now, i} end
end

local before = earliest_due(sched, G)
local first = redis.call('HINCRBY', meta, 'seq', n) - n
local hargs, zargs = {}, {}
-- tasks created earlier in this batch, by key: position of their values in hargs/zargs
local fresh = {}
local out = {'ok', now}
local created, soonest = 0, nil
-- explicit lengths: `#t` is a search in Lua 5.1, too slow in a per-task loop
local nh, nz, no = 0, 0, 2
-- new grouped tasks by group, written per group at the end (gschedule_batch)
local gbatch = {}

for i = 1, n do
  local b = 3 + (i - 1) * stride
  local key, replace, spec = ARGV[b + 1], string.byte(ARGV[b + 2], 1) == 114, ARGV[b + 4]
  local group = stride == 5 and ARGV[b + 5] or ''
  local due = dues[i]
  local done = false
  if key ~= '' then
    local f = fresh[key]
    if f then
      if replace then
        hargs[f.h + 1] = spec .. due_bin[i] .. created_at
        if f.group then
          -- not written yet: change its entries in the group's batch
          local gb = gbatch[f.group]
          gb.sched[f.gk + 2] = gb.p .. be6(due) .. f.id
          gb.due[f.gk + 1] = due_str[i]
          if due < gb.first then gb.first = due end
        else
          zargs[f.z] = due_str[i]
        end
        f.due = due
        if soonest == nil or due < soonest then soonest = due end
        out[no + 1] = 2; out[no + 2] = f.id; out[no + 3] = due; no = no + 3
      else
        out[no + 1] = 0; out[no + 2] = f.id; out[no + 3] = f.due; no = no + 3
      end
      done = true
    else
      local existing = redis.call('HGET', keys, key)
      if existing then
        local score = redis.call('ZSCORE', sched, existing)
        local g = nil
        if not score then
          score = redis.call('ZSCORE', G.gdue, existing)
          if score then g = redis.call('HGET', G.groups, existing) end
        end
        local rec = redis.call('HGET', tasks, existing)
        local active = redis.call('HEXISTS', leases, existing) == 1
        if rec and rec_ok(rec) and (score or active) then
          if replace and active then
            out[no + 1] = -1; out[no + 2] = existing; out[no + 3] = 0; no = no + 3
          elseif replace then
            -- keep the attempts made and the creation time
            local attempt, _, _, _, c = rec_head(rec)
            redis.call('HSET', tasks, existing, struct.pack('<I4', attempt) .. string.sub(spec, 5)
              .. struct.pack(TAIL, due, c))
            if g then
              gunschedule(G, g, existing, tonumber(score))
              gschedule(G, g, existing, due, now)
            else
              redis.call('ZADD', sched, due_str[i], existing)
            end
            if soonest == nil or due < soonest then soonest = due end
            out[no + 1] = 2; out[no + 2] = existing; out[no + 3] = due; no = no + 3
          else
            local _, _, _, rdue = rec_head(rec)
            out[no + 1] = 0; out[no + 2] = existing; out[no + 3] = tonumber(score or rdue); no = no + 3
          end
          done = true
        end
        -- otherwise the index entry is stale (its task is gone): fall through and create
      end
    end
  end
  if not done then
    local id = string.format('%012x', first + i)
    hargs[nh + 1] = id
    hargs[nh + 2] = spec .. due_bin[i] .. created_at
    if group ~= '' then
      local gb = gbatch[group]
      if not gb then
        gb = {sched = {}, due = {}, ids = {}, n = 0, first = due, p = gprefix(group)}
        gbatch[group] = gb
      end
      local k = gb.n
      gb.sched[k + 1] = 0; gb.sched[k + 2] = gb.p .. be6(due) .. id
      gb.due[k + 1] = due_str[i]; gb.due[k + 2] = id
      gb.ids[k + 1] = id; gb.ids[k + 2] = group
      gb.n = k + 2
      if due < gb.first then gb.first = due end
    else
      nz = nz + 2
      zargs[nz - 1] = due_str[i]
      zargs[nz] = id
    end
    nh = nh + 2
    if key ~= '' then
      redis.call('HSET', keys, key, id)
      fresh[key] = {id = id, h = nh - 1, z = nz - 1, due = due, group = group ~= '' and group or nil,
        gk = group ~= '' and gbatch[group].n - 2 or nil}
    end
    created = created + 1
    if soonest == nil or due < soonest then soonest = due end
    out[no + 1] = 1; out[no + 2] = id; out[no + 3] = due; no = no + 3
  end
end

if nh > 0 then chunked('HSET', tasks, hargs) end
if nz > 0 then chunked('ZADD', sched, zargs) end
for g, b in pairs(gbatch) do gschedule_batch(G, g, b, now) end
if created > 0 then redis.call('HINCRBY', stats, 'enqueued_total', created) end
if soonest ~= nil then wake(channel, soonest, before) end
return out
