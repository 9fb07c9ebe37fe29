-- windows: business keys that stay taken after their task finished. A task enqueued with a
--   unique window (`unique_for_ms`) keeps its key for that long after it ends (succeeded,
--   dead, cancelled or expired), so an enqueue of the key meanwhile creates nothing.
-- While the task is live its `keys` entry is "id window_ms" (key_id in base.lua reads both
-- forms). When it finishes, `uniq` takes the key: "state id due_at_ms ends_at_ms window_ms",
-- and `uniq_at` holds when the window ends. Ended windows are dropped a few at a time by each
-- call that opens one, and by recover, whose answer names the next end among its expiries,
-- so the recovery index brings a recoverer back then: the entries go by themselves, found by
-- the index, never by a scan.

-- ended windows one opening drops; recover drops up to a batch
local WINDOW_DROP = 2

-- Drops up to `max` windows that ended by `now`. Returns how many it dropped.
local function windows_drop(K, now, max)
  local ended = redis.call('ZRANGEBYSCORE', K.uniq_at, '-inf', now, 'LIMIT', 0, max)
  local n = #ended
  if n > 0 then
    chunked('ZREM', K.uniq_at, ended)
    chunked('HDEL', K.uniq, ended)
  end
  return n
end

-- A `uniq` entry `v` ("state id due ends window", or nil) as its parts: state, id, due, ends,
-- window ms; nil for none (or a malformed one). Whether it has ended is the caller's.
local function window_read(v)
  if not v then return nil end
  local state, id, due, ends, w = string.match(v, '^(%a+) (%S+) (%d+) (%d+) (%d+)$')
  if not state then return nil end
  return state, id, tonumber(due), tonumber(ends), tonumber(w)
end

-- The finished task that holds business key `key` in its unique window at `now`: its state,
-- id, due time, window (ms) and when the window ends; nil when the key is not in a window.
-- An entry that ended and was not dropped yet reads as none.
local function window_of(K, key, now)
  local state, id, due, ends, w = window_read(redis.call('HGET', K.uniq, key))
  if not state or ends <= now then return nil end
  return state, id, due, w, ends
end

-- Task `id` (record `rec`) ends: its key's `keys` entry goes if it still points at the
-- task. Given `state` ('succeeded', 'dead', 'cancelled' or 'expired') and `now`, a task with
-- a unique window keeps the key taken in `uniq` until now + its window. Without `state` (a
-- purge, a schedule tick taken back or missed) the key is simply free. Returns when the
-- window it opened ends (nil: none).
local function release_key(K, rec, id, state, now)
  if not rec_ok(rec) then return nil end
  local key = rec_key(rec)
  if key == '' then return nil end
  local holder, w = key_id(redis.call('HGET', K.keys, key))
  if holder ~= id then return nil end
  redis.call('HDEL', K.keys, key)
  if w and w > 0 and state then
    local _, _, _, due = rec_head(rec)
    local ends = math.min(now + w, MAX_DUE_MS)
    redis.call('HSET', K.uniq, key,
      state .. ' ' .. id .. ' ' .. int(due) .. ' ' .. int(ends) .. ' ' .. int(w))
    redis.call('ZADD', K.uniq_at, ends, key)
    windows_drop(K, now, WINDOW_DROP)
    return ends
  end
  return nil
end

-- The `keys` entry of task `id` under a unique window of `w` ms (0 or nil: none).
local function key_entry(id, w)
  if w and w > 0 then return id .. ' ' .. int(w) end
  return id
end
