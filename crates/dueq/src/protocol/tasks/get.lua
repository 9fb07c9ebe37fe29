-- get: reads one task (by id or business key) with its state.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] 'id' | 'key', ARGV[2] the id or key: by key, the live task under it, else the
--   newest dead one
-- Returns: {now_ms} when unknown, else {now_ms, id, state, record, score, last error ('' = none),
--   group ('' = none), the queue's max_attempts, the queue's lease_ms (for records that leave
--   them 0), expires_at_ms (-1 = none; only while scheduled), then while active: claimed_at_ms
--   (-1 = unknown), the holding worker ('' = unnamed)}: state 'scheduled' (score
--   = due time) | 'active' (score = lease deadline) | 'dead' (score = when it died) |
--   'succeeded' (score = when it finished; only with retention)
local K = queue_keys()
local active, leases, tasks, keys, dead, done = K.active, K.leases, K.tasks, K.keys, K.dead,
  K.done
local now = now_ms()
local id = resolve(keys, ARGV[1], ARGV[2])
if not id and ARGV[1] == 'key' then
  local v = redis.call('HGET', K.dead_keys, ARGV[2])
  id = v and dead_key_read(v)
  if id and not redis.call('ZSCORE', dead, id) then id = nil end
end
if not id then return {now} end
local rec = redis.call('HGET', tasks, id)
if not rec then return {now} end
local err = redis.call('HGET', K.errors, id) or ''
local group = redis.call('HGET', K.groups, id) or ''
local d = redis.call('HMGET', K.meta, 'max_attempts', 'lease_ms')
local dm, dl = d[1] or '5', d[2] or '30000'
local set = K.s[rec_ok(rec) and rec_prio(rec) or 0]
local s = redis.call('ZSCORE', set, id) or redis.call('ZSCORE', K.gdue, id)
if s then
  local e = redis.call('ZSCORE', K.expiry, id)
  return {now, id, 'scheduled', rec, tonumber(s), err, group, dm, dl, tonumber(e or '-1')}
end
s = redis.call('ZSCORE', active, id)
local lv = redis.call('HGET', leases, id)
if s or lv then
  local at, holder
  if lv then
    local _, _, _, _, _, a, h = lease_split(lv)
    at, holder = a, h
  end
  return {now, id, 'active', rec, tonumber(s or 0), err, group, dm, dl, -1, at or -1, holder or ''}
end
s = redis.call('ZSCORE', dead, id)
if s then return {now, id, 'dead', rec, tonumber(s), err, group, dm, dl} end
s = redis.call('ZSCORE', done, id)
if s then return {now, id, 'succeeded', rec, tonumber(s), err, group, dm, dl} end
return {now}
