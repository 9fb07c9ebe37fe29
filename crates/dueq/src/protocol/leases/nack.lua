-- nack: fails the current attempt of active tasks: back to scheduled after a delay, or dead.
-- KEYS: queue_keys, Span::Dead (keys.rs)
-- ARGV[1] wake channel, ARGV[2] m, ARGV[3..2+m] backoff (ms) after attempt 1, 2, ..., m (later
--   attempts use the last value), ARGV[3+m] n, then per task: id, lease_token,
--   retry_in_ms (-1 = use the backoff), permanent (0|1), error
-- Returns: {now_ms, then per task: code, due_at_ms}: 1 rescheduled, 2 dead, 0 lease_lost
local K = queue_keys()
local active, leases = K.active, K.leases
local channel = ARGV[1]
local m = tonumber(ARGV[2])
local n = tonumber(ARGV[3 + m])
local now = now_ms()
local out = {now}
local wake_up = at_concurrency(K)
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
active_unpin(K)
if timed then timings_add(K.stats, 'run_time', run_n, run_sum) end
if wake_up or K.woke then redis.call('PUBLISH', channel, int(now)) end
return out
