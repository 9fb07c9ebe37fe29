-- base: what every operation and helper uses: the call's KEYS and ARGV, Redis time, number
--   text, chunked variadic commands, the head of a sorted set, the wake-up publish.
--   The files of lib/ are the head of the function library, in the order scripts.rs lists
--   them (each may use what the ones before it define); they run once when the library
--   loads, and define locals only.
-- Each operation's function starts by setting KEYS and ARGV (its call's keys and arguments:
-- these helpers and the operations read them as in a script) and struct_unpack: the `struct`
-- library is not there while a library loads. Per-task helpers read records through that
-- local: a global is a table lookup per use in Lua 5.1.
local KEYS, ARGV, struct_unpack
local CHUNK = 1000
local MAX_DUE_MS = 253402300799999
local MAX_ATTEMPT = 4294967295

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(n)
  return string.format('%d', n)
end

-- Runs a variadic command over `args` in slices, since unpack() breaks at a few thousand values.
local function chunked(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end

-- HMGET in slices; returns one value (or false) per field, in order.
local function hmget_chunked(key, fields)
  if #fields <= CHUNK then
    if #fields == 0 then return {} end
    return redis.call('HMGET', key, unpack(fields))
  end
  local out, n = {}, 0
  for i = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
    for j = 1, #part do out[n + j] = part[j] end
    n = n + #part
  end
  return out
end

-- Earliest score of a sorted set, or nil when it is empty.
local function earliest(zkey)
  local r = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) end
  return nil
end

-- Tells idle workers (subscribed to `channel`) that a task became due earlier than they think.
local function wake(channel, due_at, before)
  if before == nil or due_at < before then
    redis.call('PUBLISH', channel, int(due_at))
  end
end

-- The live task of a business key from its `keys` entry (or nil): its id, and its unique
-- window in ms when it has one (the entry is then "id window_ms"; windows.lua).
local function key_id(v)
  if not v then return nil end
  local sp = string.find(v, ' ', 1, true)
  if not sp then return v end
  return string.sub(v, 1, sp - 1), tonumber(string.sub(v, sp + 1))
end

-- Resolves ARGV "id"/"key" addressing to a task id (or nil).
local function resolve(keys_key, by, value)
  if by == 'key' then return key_id(redis.call('HGET', keys_key, value) or nil) end
  return value
end
