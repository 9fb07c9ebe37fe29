-- stats: per-minute history (`hist`) and the timing histograms (`stats`).

local HIST_MINUTES = 61

-- Per-minute history (the `hist` hash, read by history.lua): adds `n` to counter `what` of
-- the current minute, field "<minute>:<what>" (minute = ms / 60 000). Counters: c claimed,
-- l lateness sum (ms, claim time minus due time), x lateness max (ms), s succeeded,
-- r retried, d dead. Returns the new value.
local function hist_add(hist, now, what, n)
  return redis.call('HINCRBY', hist, int(math.floor(now / 60000)) .. ':' .. what, n)
end

-- Drops history fields of minutes older than HIST_MINUTES. Called once per minute (by the
-- first claim of a minute), so the hash stays near 6 fields x 61 minutes.
local function hist_trim(hist, now)
  local oldest = math.floor(now / 60000) - HIST_MINUTES
  local fields = redis.call('HKEYS', hist)
  local old, n = {}, 0
  for i = 1, #fields do
    local m = tonumber(string.match(fields[i], '^(%d+):'))
    if not m or m < oldest then
      n = n + 1
      old[n] = fields[i]
    end
  end
  if n > 0 then chunked('HDEL', hist, old) end
end

-- Timings counted where work is handed out and finished (DESIGN 4.4), in the `stats` hash:
-- lateness (claim time minus due time) at each claim, run time (ack or nack time minus claim
-- time) at each finish. Each is a histogram: field "<name>:<i>" counts the values in bucket
-- i (value <= bound i, above bound i - 1; the last bound is +Inf), "<name>_sum_ms" their
-- sum. Bounds in ms, LATENESS_BOUNDS_MS and RUN_TIME_BOUNDS_MS in task.rs; each list ends in
-- infinity (1 / 0), the +Inf bucket, so a scan always stops inside it.
local LATE_BOUNDS = {0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
  60000, 300000, 900000, 3600000, 14400000, 86400000, 1 / 0}
local RUN_BOUNDS = {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
  300000, 900000, 3600000, 1 / 0}

-- The bucket of `v` in `bounds`, looked for from bucket `near` (the previous value's: the
-- tasks of one call come in due order, so their values are close): a step or two, not a
-- scan from the first bound.
local function bucket(bounds, v, near)
  local i = near or 1
  while v > bounds[i] do i = i + 1 end
  while i > 1 and v <= bounds[i - 1] do i = i - 1 end
  return i
end

-- Adds the counts `counts` (bucket -> n) and `sum` to histogram `name` of `stats`.
local function timings_add(stats, name, counts, sum)
  for i, n in pairs(counts) do redis.call('HINCRBY', stats, name .. ':' .. i, n) end
  redis.call('HINCRBY', stats, name .. '_sum_ms', int(sum))
end
