-- frozen_clock: a frozen "now" for tests; put at the top of each operation's function only in a
-- debug build with the `frozen-clock` feature (scripts.rs, src/frozen_clock.rs), never in a release
-- build.
-- KEYS: none of its own
-- ARGV: the last one is the clock (epoch ms; 0 = Redis TIME), added by call.rs; it is taken
--   off here, so the script sees its own ARGV unchanged
-- Returns: nothing (shadows now_ms)
local TEST_NOW_MS = tonumber(table.remove(ARGV)) or 0
local redis_now_ms = now_ms
local function now_ms()
  if TEST_NOW_MS > 0 then return TEST_NOW_MS end
  return redis_now_ms()
end
