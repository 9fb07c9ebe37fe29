-- nack: fails the current attempt of active tasks: back to scheduled after a delay, or dead.
-- KEYS[1] sched  KEYS[2] active  KEYS[3] leases  KEYS[4] tasks  KEYS[5] keys  KEYS[6] dead
-- KEYS[7] stats  KEYS[8] meta  KEYS[9] errors  KEYS[10] hist  KEYS[11..19] group keys
-- KEYS[20..29] option keys (see lib/)  KEYS[30] dead_keys
-- ARGV[1] wake channel, ARGV[2] m, ARGV[3..2+m] backoff (ms) after attempt 1, 2, ..., m (later
--   attempts use the last value), ARGV[3+m] n, then per task: id, lease_token,
--   retry_in_ms (-1 = use the backoff), permanent (0|1), error
-- Returns: {now_ms, then per task: code, due_at_ms}: 1 rescheduled, 2 dead, 0 lease_lost
local K = {sched = KEYS[1], tasks = KEYS[4], keys = KEYS[5], dead = KEYS[6], stats = KEYS[7], meta = KEYS[8],
  errors = KEYS[9], hist = KEYS[10], G = group_keys(11), O = option_keys(20), dead_keys = KEYS[30]}
local active, leases = KEYS[2], KEYS[3]
K.G.meta = K.meta
local channel = ARGV[1]
local m = tonumber(ARGV[2])
local n = tonumber(ARGV[3 + m])
local now = now_ms()
local out = {now}
local wake_up = at_concurrency(K.meta, active)
-- run time histogram counts of this call (bucket -> tasks), for leases that say their claim time
local run_n, run_sum, timed = {}, 0, false
for i = 1, n do
  local b = 3 + m + (i - 1) * 5
  local id, token = ARGV[b + 1], ARGV[b + 2]
  local lv = redis.call('HGET', leases, id)
  local code, due = 0, 0
  local current, at
  if lv then
    local t, _, _, _, _, a = lease_split(lv)
    current, at = t, a
  end
  if current == token then
    if at then
      local run = math.max(now - at, 0)
      local b = bucket(RUN_BOUNDS, run)
      run_n[b] = (run_n[b] or 0) + 1
      run_sum = run_sum + run
      timed = true
    end
    redis.call('ZREM', active, id)
    redis.call('HDEL', leases, id)
    local rec = redis.call('HGET', K.tasks, id)
    if rec then
      local retry = tonumber(ARGV[b + 3])
      if retry < 0 and rec_ok(rec) then
        retry = tonumber(ARGV[2 + math.min(rec_head(rec) + 1, m)] or '0')
      end
      code, due = fail_attempt(K, channel, id, rec, now, retry, ARGV[b + 4] == '1', ARGV[b + 5])
    end
  end
  out[#out + 1] = code
  out[#out + 1] = due
end
if timed then timings_add(K.stats, 'run_time', run_n, run_sum) end
if wake_up or K.woke then redis.call('PUBLISH', channel, int(now)) end
return out
