-- keys: an operation's KEYS by name.
--   Every operation on a queue takes the queue's keys in one order (SCRIPT_KEYS in keys.rs),
--   or the first part of it (keys.rs, `Span`: small frequent operations such as extend and ack
--   take fewer), and reads them by name with queue_keys: `K.tasks`, `K.gready`, ... A key
--   past the part an operation takes is nil. The unit test in scripts.rs holds this list
--   equal to keys.rs, and checks that every `K.<name>` an operation reads, itself or through
--   the helpers it calls, is within the part it takes.

-- The queue's keys of this call, by name. `K.s[p]` is the scheduled set of priority `p`
-- (`K.s[0]` is `K.sched`; priorities.lua). Helpers take `K` and may keep per-call state in
-- it (`K.pl`, `K.pn`, `K.woke`).
local function queue_keys()
  local K = {active = KEYS[1], leases = KEYS[2], tasks = KEYS[3], keys = KEYS[4],
    meta = KEYS[5], stats = KEYS[6], errors = KEYS[7], hist = KEYS[8], done = KEYS[9],
    gsched = KEYS[10], gdue = KEYS[11], groups = KEYS[12], gready = KEYS[13],
    gactive = KEYS[14], gparked = KEYS[15], rate = KEYS[16], rate_n = KEYS[17],
    rate_idle = KEYS[18], uniq = KEYS[19], uniq_at = KEYS[20], sched = KEYS[21],
    expiry = KEYS[31], dead = KEYS[32], dead_keys = KEYS[33], claims = KEYS[34],
    schedule_state = KEYS[35], schedule_next = KEYS[36], schedule_fired = KEYS[37],
    schedules = KEYS[38], webhook = KEYS[39]}
  if K.sched then
    K.s = {[0] = KEYS[21], KEYS[22], KEYS[23], KEYS[24], KEYS[25], KEYS[26], KEYS[27],
      KEYS[28], KEYS[29], KEYS[30]}
  end
  return K
end

-- The one key of an operation on a key outside any hash tag (`GlobalKey` in keys.rs), under
-- its name: `global_key('workers').workers`.
local function global_key(name)
  return {[name] = KEYS[1]}
end
