-- worker_beat: registers or refreshes one live worker process (its heartbeat) and trims
--   entries whose heartbeat expired.
-- KEYS: global_key('workers'): dueq:workers (hash: worker id -> "<last_seen_ms> <expires_at_ms> <started_at_ms>
--   <in_hand>\n<info JSON>"; global, outside any hash tag)
-- ARGV[1] worker id, ARGV[2] ttl_ms (the entry expires this long after this beat),
--   ARGV[3] in_hand (tasks whose handlers run now), ARGV[4] info JSON (opaque here),
--   ARGV[5] cap (most entries), ARGV[6] sample (entries checked for expiry per beat)
-- Returns: {now_ms, 1 if registered else 0 (the registry is full of live workers),
--   started_at_ms (first beat of this id, Redis clock; -1 when refused), entries removed}
-- Trimming: each beat checks ARGV[6] random entries (HRANDFIELD) and deletes the expired
-- ones, like Redis' own active expiry; a full registry is swept completely before a new id is
-- refused. Readers (worker_list) skip expired entries, so trimming only bounds the size.
local workers = global_key('workers').workers
local id = ARGV[1]
local now = now_ms()
local function expired(v)
  local exp = tonumber(string.match(v, '^%d+ (%d+) '))
  return exp == nil or exp <= now
end
local removed = 0
local sample = redis.call('HRANDFIELD', workers, tonumber(ARGV[6]), 'WITHVALUES')
for i = 1, #sample, 2 do
  if sample[i] ~= id and expired(sample[i + 1]) then
    removed = removed + redis.call('HDEL', workers, sample[i])
  end
end
local old = redis.call('HGET', workers, id)
local started = now
if old then
  started = tonumber(string.match(old, '^%d+ %d+ (%d+) ')) or now
elseif redis.call('HLEN', workers) >= tonumber(ARGV[5]) then
  -- full: sweep everything once (bounded by the cap) before refusing a newcomer
  local all = redis.call('HGETALL', workers)
  for i = 1, #all, 2 do
    if expired(all[i + 1]) then
      removed = removed + redis.call('HDEL', workers, all[i])
    end
  end
  if redis.call('HLEN', workers) >= tonumber(ARGV[5]) then
    return {now, 0, -1, removed}
  end
end
local head = int(now) .. ' ' .. int(now + tonumber(ARGV[2])) .. ' ' .. int(started) .. ' '
  .. ARGV[3] .. '\n'
redis.call('HSET', workers, id, head .. ARGV[4])
return {now, 1, started, removed}
