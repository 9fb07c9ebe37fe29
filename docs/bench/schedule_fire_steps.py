#!/usr/bin/env python3
"""Redis CPU per tick of schedule_fire.lua, step by step (docs/BENCHMARKS.md, W8).

Runs against a redis-server of its own (it FLUSHALLs it: never point it at a shared one):

    redis-server --port 16391 --save '' --daemonize yes
    python3 docs/bench/schedule_fire_steps.py 16391 [rounds]

It stores 99 600 every-second schedules (definition, state and index entry), then calls the
script (as a function of a library with the helpers of lib/*.lua at its head, as
crates/dueq/src/protocol/scripts.rs builds it; FUNCTION LOAD, then FCALL, with every key of
SCRIPT_KEYS in protocol/keys.rs as the library passes them) 600 times with the next 100
schedules each, TICKS ticks per schedule (10: a firer of W8 refills ten ticks fired ahead per
schedule, 1 000 ticks a call), each schedule once, so a variant that stops early meets no
tick it created itself. Redis CPU (INFO cpu) over the calls, per tick handed in. Variants,
interleaved round by round, median per variant:
  noop     reads its ARGV count and returns (the cost of the call and its arguments)
  to-2     the script up to its step 2 (states read, ticks planned), then returns
  to-3     up to step 3 (and the lookup of the ticks' keys)
  to-4     up to step 4 (tasks written)
  full     the whole script
  floor    only the writes a tick needs (the states read; task, key, due entry, new state,
           fired ticks and index score written), with no checks
"""
import statistics, struct, sys

from harness import PROTO, Redis, flags, function, key, library as make_library, queue_keys

NS, BATCH, CALLS, TICKS = 99600, 100, 600, 10
FIRE_OP = 'schedules/schedule_fire.lua'
# as dueq's firer sends them: MAX_TICKS_AHEAD, REFILL_AT and FIRE_AHEAD_MS (schedule/mod.rs),
# the default misfire policy (skip) and DEFAULT_MISFIRE_GRACE_MS (schedule/spec.rs)
AHEAD_MAX, REFILL, LEAD_MS, MISFIRE, GRACE_MS = 12, 2, 12000, 's', 1000


EARLY = ('\ndo\n  local o = {now}\n  for i = 1, n do o[3 * i - 1] = 2 o[3 * i] = 0'
         ' o[3 * i + 1] = 0 end\n  return o\nend\n')
NOOP = ('local n = tonumber(ARGV[2])\nlocal o = {0}\n'
        'for i = 1, n do o[3 * i - 1] = 2 o[3 * i] = 0 o[3 * i + 1] = 0 end\nreturn o\n')
FLOOR = '''local K = queue_keys()
local sched, tasks, keys, state, index, fired = K.sched, K.tasks, K.keys, K.schedule_state,
  K.schedule_next, K.schedule_fired
local n = tonumber(ARGV[2])
local names, recs, kargs, zs, sargs, targs, zi = {}, {}, {}, {}, {}, {}, {}
local b, nr = 5, 0
local seq = redis.call('HINCRBY', K.meta, 'seq', n * 10) - n * 10
for i = 1, n do
  local name, c = ARGV[b], tonumber(ARGV[b + 3])
  local spec = ARGV[b + 8 + c]
  names[i] = name
  local last
  for k = 1, c do
    local tick = ARGV[b + 3 + k]
    seq = seq + 1
    local id = string.format('%012x', seq)
    local key = 'schedule:' .. name .. ':' .. tick
    recs[nr + 1], recs[nr + 2] = id, key .. spec
    kargs[nr + 1], kargs[nr + 2] = key, id
    zs[nr + 1], zs[nr + 2] = tick, id
    nr = nr + 2
    last = tick
  end
  local nx = ARGV[b + 4 + c]
  sargs[2 * i - 1], sargs[2 * i] = name, nx .. ' ' .. last .. ' 0 0 1 fp/' .. ARGV[b + 1]
  targs[2 * i - 1], targs[2 * i] = name, last
  zi[2 * i - 1], zi[2 * i] = nx, name
  b = b + 12 + c
end
redis.call('HMGET', state, unpack(names))
redis.call('HMGET', fired, unpack(names))
for i = 1, nr, 1000 do
  local j = math.min(i + 999, nr)
  redis.call('HSET', tasks, unpack(recs, i, j))
  redis.call('ZADD', sched, unpack(zs, i, j))
  redis.call('HSET', keys, unpack(kargs, i, j))
end
redis.call('HSET', state, unpack(sargs))
redis.call('HSET', fired, unpack(targs))
redis.call('ZADD', index, unpack(zi))
local o = {0}
for i = 1, n do o[3 * i - 1] = 1 o[3 * i] = 1 o[3 * i + 1] = 0 end
return o
'''


def library(body):
    """A function library like dueq's, with `body` as its one function `steps_fire`."""
    return make_library('steps', [function('steps_fire', body, flags(FIRE_OP))])


def variants():
    fire = open(PROTO + FIRE_OP).read()

    def upto(step):
        at = fire.index('-- %d. ' % step)
        return library(fire[:at] + EARLY + fire[at:])

    return {'noop': library(NOOP), 'to-2': upto(2), 'to-3': upto(3), 'to-4': upto(4),
            'full': library(fire), 'floor': library(FLOOR)}


def run(r, src):
    r('FLUSHALL')
    r('FUNCTION', 'LOAD', 'REPLACE', src)
    keys = queue_keys('steps', FIRE_OP)
    definition = b'{"every_ms":1000}\n{}'
    now = int(r('TIME')[0]) * 1000
    start = now - 10**9  # every tick far in the past: always due
    names = ['s%d' % i for i in range(NS)]
    for i in range(0, NS, 1000):
        args, index = [], []
        defs = []
        for name in names[i:i + 1000]:
            args += [name, '%d %d 0 0 0 fp/%d' % (start, start - 1000, start - 2000)]
            index += [start - 1000, name]
            defs += [name, definition]
        r('HSET', key('steps', 'schedule_state'), *args)
        r('HSET', key('steps', 'schedules'), *defs)
        r('ZADD', key('steps', 'schedule_next'), *index)
    c0, handed = r.cpu(), 0
    for c in range(CALLS):
        batch = names[c * BATCH:(c + 1) * BATCH]
        args = [key('steps', 'wake'), len(batch), AHEAD_MAX, REFILL]
        for name in batch:
            # name, expected next fire, missed ticks, the ticks
            args += [name, start, 0, TICKS]
            args += [start + 1000 * k for k in range(TICKS)]
            # next fire, overlap allow, no group, lead; the ticks' spec, with an empty key (the
            # script puts each tick's in); the definition; misfire policy and grace
            args += [start + 1000 * TICKS, 'a', b'', LEAD_MS,
                     struct.pack('<IHIH', 0, 5, 30000, 0) + b'{}', definition, MISFIRE,
                     GRACE_MS]
        got = r('FCALL', 'steps_fire', len(keys), *keys, *args)
        # the variants that write return code 1 (applied) per schedule
        assert len(got) == 1 + 3 * len(batch) and set(got[1::3]) <= {1, 2}, got[:4]
        handed += len(batch) * TICKS
    return (r.cpu() - c0) * 1e6 / handed, r('HLEN', key('steps', 'tasks')) == handed


def main():
    port = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    r = Redis(port)
    vs = variants()
    seen = {k: [] for k in vs}
    for _ in range(rounds):
        for name, src in vs.items():
            cost, created_all = run(r, src)
            # the variants that reach step 4 create every tick's task (none refused as stale)
            assert created_all == (name in ('to-4', 'full', 'floor')), name
            seen[name].append(cost)
    for name, xs in seen.items():
        print('%-6s %6.2f us per tick (median of %d: %s)' % (
            name, statistics.median(xs), len(xs), ', '.join('%.2f' % x for x in xs)))


if __name__ == '__main__':
    main()
