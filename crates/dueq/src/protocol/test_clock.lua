-- test_clock: the virtual clock of a Redis run with `dueq serve --test-clock`; opens each
-- function of the test clock's library (scripts.rs), never of the library other Redis servers
-- run.
-- KEYS: the last one is dueq:test_clock (string: the clock's offset from Redis TIME, ms),
--   added by call.rs; it is taken off here, so the operation sees its own KEYS unchanged
-- Returns: nothing (shadows now_ms: Redis TIME plus the offset, read once per call)
local TEST_CLOCK_OFFSET_MS = tonumber(redis.call('GET', table.remove(KEYS))) or 0
local clock_now_ms = now_ms
local function now_ms()
  return clock_now_ms() + TEST_CLOCK_OFFSET_MS
end
