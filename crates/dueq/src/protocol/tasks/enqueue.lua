-- enqueue: adds a batch of tasks; a live business key keeps (or replaces) its task.
-- KEYS: queue_keys, Span::Scheduled (keys.rs)
-- ARGV[1] wake channel
-- ARGV[2] n (tasks in this batch), ARGV[3] values per task (4, or 5 when a task of the batch
--   has a group), then per task:
--   key ('' = none); mode: on_conflict ('k' keep | 'r' replace | 'b' debounce) followed by due
--   kind ('a' at | 'd' delay), e.g. 'kd', then optionally ' p' (a priority above 0, which the
--   spec carries), ' t<ms>' (ttl), ' e<ms>' (expires at), ' m<ms>' (debounce_max_ms) and
--   ' u<ms>' (unique window; without it a keyed task takes the queue's `unique_for_ms`
--   setting); due value (ms); spec (the record without its tail,
--   see lib/record.lua; it carries the priority); group (5th value; '' = none; a replace keeps the
--   task's group)
--   After the tasks' values, for partition p > 0 of a queue of several: the partition count
--   the client routed by.
-- Returns: {'ok', now_ms, then per task: code, id, due_at_ms}
--   code 1 created, 0 existing task kept, 2 existing task replaced, -1 in_progress (replace refused),
--   10 + s: the key is in the unique window of finished task `id` (nothing written, a replace
--   refused), s its state: 0 succeeded, 1 dead, 2 cancelled, 3 expired (windows.lua)
--   or {'bad_due', now_ms, index} when a due time lands past year 9999 (nothing written),
--   or {'bad_expiry', now_ms, index, 't' | 'e'} when a task's expiry (ttl or expires at) is
--   at or before its due time, so it could never run (nothing written),
--   or {'layout', now_ms} when this partition's `partitions` setting is not the count the
--   client routed by (nothing written; after a FLUSHALL or a change of the count, a client
--   that routes by its cached layout would put tasks where no fresh client looks)
-- A replace (or debounce) takes the new spec whole: payload, settings, priority and expiry
-- (none given: the old expiry goes). A debounce never moves the due time past the task's
-- creation (its first enqueue) + debounce_max_ms. The key's unique window is the new one's too.
local K = queue_keys()
-- locals for what the per-task loops use: a global or a table field is a lookup per use in
-- Lua 5.1
local sched, tasks, keys, meta, stats, leases = K.sched, K.tasks, K.keys, K.meta, K.stats,
  K.leases
local ARGV, byte, format = ARGV, string.byte, string.format
local channel = ARGV[1]
local n = tonumber(ARGV[2])
local stride = tonumber(ARGV[3])
local now = now_ms()
local routed_by = ARGV[4 + n * stride]
if routed_by and redis.call('HGET', meta, 'partitions') ~= routed_by then return {'layout', now} end
local created_at = struct.pack('<I6', now)

-- Due times as numbers and as score strings; a delay shared by many tasks is computed once.
local dues, due_str, due_bin, by_delay = {}, {}, {}, {}
-- expiry (epoch ms), debounce cap (ms) and priority per task, when given (a task without
-- options pays no parsing)
local exps, dmax, prio, uw = {}, {}, {}, {}
for i = 1, n do
  local b = 3 + (i - 1) * stride
  local v, mode = ARGV[b + 3], ARGV[b + 2]
  if byte(mode, 2) == 100 then -- 'd': delay
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
  if #mode > 2 then
    for kind, ms in string.gmatch(mode, ' (%a)(%d*)') do
      if kind == 'p' then
        prio[i] = rec_prio(ARGV[b + 4])
      elseif kind == 't' then
        exps[i] = math.min(now + tonumber(ms), MAX_DUE_MS)
      elseif kind == 'e' then
        exps[i] = math.min(tonumber(ms), MAX_DUE_MS)
      elseif kind == 'm' then
        dmax[i] = tonumber(ms)
      elseif kind == 'u' then
        uw[i] = tonumber(ms)
      end
      if exps[i] and exps[i] <= dues[i] and (kind == 't' or kind == 'e') then
        return {'bad_expiry', now, i, kind}
      end
    end
  end
end

local before = earliest_due(K)
local first = redis.call('HINCRBY', meta, 'seq', n) - n
-- zl[p]: score, id pairs for the set of priority p, written at the end (nzl[p] values)
local hargs, zl, nzl = {}, {[0] = {}}, {[0] = 0}
local zargs = zl[0]
-- tasks created earlier in this batch, by key: position of their values in hargs/zl
local fresh = {}
-- priorities above 0 placed by this call, tasks moved between priorities within the batch
local used, moved, nmoved = {}, {}, 0
local anyexp = false
local out = {'ok', now}
local created, soonest = 0, nil
-- explicit lengths: `#t` is a search in Lua 5.1, too slow in a per-task loop
local nh, nz, no = 0, 0, 2
-- new grouped tasks by group, written per group at the end (gschedule_batch)
local gbatch = {}

-- Adds `id` at `due` to the batch's list for priority `p`; returns its score's index.
local function zlist_add(p, ds, id)
  if p == 0 then
    nz = nz + 2
    zargs[nz - 1] = ds
    zargs[nz] = id
    return nz - 1
  end
  used[p] = true
  local l = zl[p]
  if not l then
    l = {}
    zl[p] = l
    nzl[p] = 0
  end
  local k = nzl[p] + 2
  l[k - 1] = ds
  l[k] = id
  nzl[p] = k
  return k - 1
end

-- Marks priority `p` as used by grouped tasks (meta `gprio`) before a task of it is placed,
-- so that the group heads read later in this call see it.
local gmarked = {}
local function gmark(p)
  if p > 0 and not gmarked[p] then
    gmarked[p] = true
    prios_mark(meta, {[p] = true}, 'gprio')
    K.pl = nil
  end
end

-- The unique window (ms, 0 none) of keyed task `i`: its own, else the queue's setting (read
-- once per call, and only when a keyed task needs it).
local window_default = nil
local function window_ms(i)
  if uw[i] then return uw[i] end
  if not window_default then
    window_default = tonumber(redis.call('HGET', meta, 'unique_for_ms') or '0') or 0
  end
  return window_default
end

-- the enqueue code of a key in the unique window of a task finished in each state
local WINDOW_CODE = {succeeded = 10, dead = 11, cancelled = 12, expired = 13}
-- whether any key of the queue is in a window (looked at once per call, on the first key
-- that needs it, so a queue without windows pays nothing per task)
local any_window = nil

-- Sets or drops the expiry of task `id` as task `i` of the batch asks.
local function set_expiry(i, id)
  if exps[i] then
    redis.call('ZADD', K.expiry, exps[i], id)
    anyexp = true
  else
    redis.call('ZREM', K.expiry, id)
  end
end

for i = 1, n do
  local b = 3 + (i - 1) * stride
  local key, spec = ARGV[b + 1], ARGV[b + 4]
  local c = byte(ARGV[b + 2], 1)
  local replace, debounce = c ~= 107, c == 98 -- 'k' keeps; 'r' and 'b' replace
  local group = stride == 5 and ARGV[b + 5] or ''
  local due, ds, db = dues[i], due_str[i], due_bin[i]
  local done = false
  if key ~= '' then
    local f = fresh[key]
    if f then
      if replace then
        if debounce and dmax[i] and due > now + dmax[i] then
          -- created by this very call, so its first enqueue is now
          due = now + dmax[i]
          ds, db = int(due), struct.pack('<I6', due)
        end
        hargs[f.h + 1] = spec .. db .. created_at
        if f.group then
          -- not written yet: change its entries in the group's batch
          local gb = gbatch[f.group]
          gmark((prio[i] or 0))
          gb.sched[f.gk + 2] = gpprefix(f.group, (prio[i] or 0)) .. be6(due) .. f.id
          gb.due[f.gk + 1] = ds
          if due < gb.first then gb.first = due end
        else
          local p = (prio[i] or 0)
          if p == f.p then
            zl[p][f.z] = ds
          else
            if not f.ps then
              f.ps = {}
              nmoved = nmoved + 1
              moved[nmoved] = f
            end
            f.ps[f.p] = true
            f.p = p
            f.z = zlist_add(p, ds, f.id)
          end
        end
        if f.exp or exps[i] then set_expiry(i, f.id) end
        f.exp = exps[i] ~= nil
        local w = window_ms(i)
        if w ~= f.w then
          redis.call('HSET', keys, key, key_entry(f.id, w))
          f.w = w
        end
        f.due = due
        if soonest == nil or due < soonest then soonest = due end
        out[no + 1] = 2; out[no + 2] = f.id; out[no + 3] = due; no = no + 3
      else
        out[no + 1] = 0; out[no + 2] = f.id; out[no + 3] = f.due; no = no + 3
      end
      done = true
    else
      local existing, ew = key_id(redis.call('HGET', keys, key))
      if existing then
        local rec = redis.call('HGET', tasks, existing)
        local ok = rec and rec_ok(rec)
        local op = ok and rec_prio(rec) or 0
        local score = redis.call('ZSCORE', K.s[op], existing)
        local g = nil
        if not score then
          score = redis.call('ZSCORE', K.gdue, existing)
          if score then g = redis.call('HGET', K.groups, existing) end
        end
        local active = redis.call('HEXISTS', leases, existing) == 1
        if ok and (score or active) then
          if replace and active then
            out[no + 1] = -1; out[no + 2] = existing; out[no + 3] = 0; no = no + 3
          elseif replace then
            -- keep the attempts made and the creation time
            local attempt, _, _, _, cr = rec_head(rec)
            if debounce and dmax[i] and due > cr + dmax[i] then due = math.max(cr + dmax[i], 0) end
            redis.call('HSET', tasks, existing, struct.pack('<I4', attempt) .. string.sub(spec, 5)
              .. struct.pack(TAIL, due, cr))
            if g then
              gunschedule(K, g, existing, tonumber(score), op)
              gmark((prio[i] or 0))
              gschedule(K, g, existing, due, now, (prio[i] or 0))
            else
              local p = (prio[i] or 0)
              if p ~= op then
                redis.call('ZREM', K.s[op], existing)
                if p > 0 then used[p] = true end
              end
              redis.call('ZADD', K.s[p], due, existing)
            end
            set_expiry(i, existing)
            local w = window_ms(i)
            if w ~= (ew or 0) then redis.call('HSET', keys, key, key_entry(existing, w)) end
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
      if not done then
        if any_window == nil then any_window = redis.call('EXISTS', K.uniq) == 1 end
        local state, wid, wdue = nil, nil, nil
        if any_window then state, wid, wdue = window_of(K, key, now) end
        if state then
          out[no + 1] = WINDOW_CODE[state] or 10; out[no + 2] = wid; out[no + 3] = wdue; no = no + 3
          done = true
        end
      end
    end
  end
  if not done then
    local id = format('%012x', first + i)
    hargs[nh + 1] = id
    hargs[nh + 2] = spec .. db .. created_at
    local p, z = 0, nil
    if group ~= '' then
      local gb = gbatch[group]
      if not gb then
        gb = {sched = {}, due = {}, ids = {}, n = 0, first = due}
        gbatch[group] = gb
      end
      local k = gb.n
      p = (prio[i] or 0)
      gmark(p)
      gb.sched[k + 1] = 0; gb.sched[k + 2] = gpprefix(group, p) .. be6(due) .. id
      gb.due[k + 1] = ds; gb.due[k + 2] = id
      gb.ids[k + 1] = id; gb.ids[k + 2] = group
      gb.n = k + 2
      if due < gb.first then gb.first = due end
    else
      p = prio[i] or 0
      if p == 0 then
        nz = nz + 2
        zargs[nz - 1] = ds
        zargs[nz] = id
        z = nz - 1
      else
        z = zlist_add(p, ds, id)
      end
    end
    if exps[i] then set_expiry(i, id) end
    nh = nh + 2
    if key ~= '' then
      local w = window_ms(i)
      redis.call('HSET', keys, key, key_entry(id, w))
      fresh[key] = {id = id, h = nh - 1, z = z, p = p, due = due, exp = exps[i] ~= nil, w = w,
        group = group ~= '' and group or nil, gk = group ~= '' and gbatch[group].n - 2 or nil}
    end
    created = created + 1
    if soonest == nil or due < soonest then soonest = due end
    out[no + 1] = 1; out[no + 2] = id; out[no + 3] = due; no = no + 3
  end
end

if nh > 0 then chunked('HSET', tasks, hargs) end
if nz > 0 then chunked('ZADD', sched, zargs) end
for p = 1, 9 do
  if zl[p] and nzl[p] > 0 then chunked('ZADD', K.s[p], zl[p]) end
end
-- a task moved between priorities within the batch leaves only its last set's entry
for j = 1, nmoved do
  local f = moved[j]
  for p in pairs(f.ps) do
    if p ~= f.p then redis.call('ZREM', K.s[p], f.id) end
  end
end
prios_mark(meta, used)
if anyexp then redis.call('HSETNX', meta, 'exp', '1') end
for g, b in pairs(gbatch) do gschedule_batch(K, g, b, now) end
if created > 0 then redis.call('HINCRBY', stats, 'enqueued_total', created) end
if soonest ~= nil then wake(channel, soonest, before) end
return out
