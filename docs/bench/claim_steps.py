#!/usr/bin/env python3
"""Redis time per call of claim.lua and ack.lua, the fixed part step by step (docs/BENCHMARKS.md,
W7, issue 15).

Runs against a redis-server of its own (it FLUSHALLs it: never point it at a shared one):

    redis-server --port 16391 --save '' --daemonize yes
    python3 docs/bench/claim_steps.py 16391 [rounds]

Each variant is a function of a library with lib.lua at its head, as
crates/dueq/src/protocol/scripts.rs builds it (FUNCTION LOAD, then FCALL). Times are Redis's
own for the calls (`INFO commandstats`, `cmdstat_fcall` usec over all of them), so they leave out
the socket work of a round trip, which costs Redis more again (see BENCHMARKS.md). Median of
the rounds, in µs per call:

  ping-cpu-1      Redis CPU (INFO cpu, socket work included) per PING sent one at a time, the
                  way each claim and ack of a worker goes (a round trip each)
  ping-cpu-10     the same with 10 PINGs per write (pipelined)
  nop-0, nop-30   a function that returns at once, with 0 and with claim's 30 keys
  claim-<step>    claim.lua on an empty queue, returning before <step> (the fixed part)
  claim-empty     the whole claim.lua on an empty queue (an idle look, max 1 000)
  task-10         claims (max 1 000) that get 10 tasks of group A each, as in W7 (20 000 tasks
                  of A are due and `group_concurrency` is 10), each followed by the ack of its
                  10 (which frees the group's slots, makes it ready again and publishes): both
                  calls, per task
  task-10-plain   the same without groups (claims of max 10)
  task-1000-plain the same with claims and acks of 1 000, as in W2
"""
import statistics, struct, sys

from harness import PROTO, Redis, function, library as make_library

CALLS = 2000


def library(claim_body):
    return make_library('steps', [
        function('s_claim', claim_body, "'allow-oom'"),
        function('s_ack', open(PROTO + 'leases/ack.lua').read(), "'allow-oom'"),
        function('s_enqueue', open(PROTO + 'tasks/enqueue.lua').read()),
        function('s_nop', 'return 1', "'no-writes'")])


CLAIM = open(PROTO + 'leases/claim.lua').read()
# where claim-<step> returns (the first line of the step)
STEPS = [('start', 'local sched, active'), ('keys', 'local max = tonumber'),
         ('cfg', 'local paused ='), ('parse', 'local out = {now'),
         ('defs', "if forget ~= ''"), ('main', 'local room = max - nz'),
         ('tail', 'if by_conc then out[7]')]


def keys(q, names):
    return ['dueq:{%s}:%s' % (q, k) for k in names.split()]


GROUP = 'gsched gdue groups gready gactive gparked rate rate_n rate_idle'
OPTION = ' '.join('sched:%d' % p for p in range(1, 10)) + ' expiry'


def claim_keys(q):
    return keys(q, 'sched active leases tasks meta claims errors dead stats hist keys '
                + GROUP + ' ' + OPTION)


def ping_cpu(r, pipe):
    """Redis CPU (`INFO cpu`, socket work included) per PING, sent `pipe` at a time, µs."""
    n = CALLS * 5
    msg = b'*1\r\n$4\r\nPING\r\n' * pipe
    before = r.cpu()
    for _ in range(n // pipe):
        r.s.sendall(msg)
        for _ in range(pipe):
            r._read()
    return (r.cpu() - before) / (n // pipe * pipe) * 1e6


def repeat(r, args):
    """Redis's time per call of `args`, sent CALLS times, µs."""
    before = r.fcall_usec()
    for _ in range(CALLS):
        r(*args)
    return (r.fcall_usec() - before) / CALLS


def cycles(r, group, per=10):
    """Claims of `per` + their acks on a queue with 20 000 due tasks (of group A, with its
    `group_concurrency` `per` and claims of max 1 000; or without a group and claims of max
    `per`): Redis's time per task."""
    q = 'steps-%s-%d' % (group, per)
    if group:
        r('HSET', keys(q, 'meta')[0], 'group_concurrency', per)
    spec = struct.pack('<IHIH', 0, 0, 0, 0) + b'x' * 100
    ek = keys(q, 'sched tasks keys meta stats leases ' + GROUP + ' ' + OPTION)
    for _ in range(20):
        args = ['dueq:{%s}:wake' % q, 1000, 5]
        for _ in range(1000):
            args += ['', 'kd', 0, spec, group]
        r('FCALL', 's_enqueue', len(ek), *ek, *args)
    ck = claim_keys(q)
    ak = keys(q, 'active leases tasks keys done stats meta errors hist ' + GROUP)
    cycles = 19000 // per
    before = r.fcall_usec()
    for _ in range(cycles):
        got = r('FCALL', 's_claim', len(ck), *ck, 1000 if group else per, 0, '', '', 0)
        n = int(got[10])
        assert n == per, n
        ack = ['dueq:{%s}:wake' % q, n]
        for i in range(n):
            ack += [got[11 + 6 * i], got[12 + 6 * i]]
        r('FCALL', 's_ack', len(ak), *ak, *ack)
    return (r.fcall_usec() - before) / (cycles * per)


def main():
    port = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    r = Redis(port)
    res = {}
    empty = claim_keys('empty')
    for _ in range(rounds):
        r('FLUSHALL')
        r('FUNCTION', 'FLUSH')
        r('FUNCTION', 'LOAD', library(CLAIM))
        res.setdefault('ping-cpu-1', []).append(ping_cpu(r, 1))
        res.setdefault('ping-cpu-10', []).append(ping_cpu(r, 10))
        res.setdefault('nop-0', []).append(repeat(r, ['FCALL', 's_nop', 0]))
        res.setdefault('nop-30', []).append(repeat(r, ['FCALL', 's_nop', 30, *empty]))
        for step, line in STEPS:
            body = CLAIM.replace(line, 'do return {0} end\n' + line, 1)
            assert body != CLAIM, step
            r('FUNCTION', 'LOAD', 'REPLACE', library(body))
            res.setdefault('claim-' + step, []).append(
                repeat(r, ['FCALL', 's_claim', 30, *empty, 1000, 0, '', '', 0]))
        r('FUNCTION', 'LOAD', 'REPLACE', library(CLAIM))
        res.setdefault('claim-empty', []).append(
            repeat(r, ['FCALL', 's_claim', 30, *empty, 1000, 0, '', '', 0]))
        res.setdefault('task-10', []).append(cycles(r, 'A'))
        res.setdefault('task-10-plain', []).append(cycles(r, ''))
        res.setdefault('task-1000-plain', []).append(cycles(r, '', 1000))
    r('FUNCTION', 'DELETE', 'steps')
    for name, v in res.items():
        print('%-16s %7.1f   (%s)' % (name, statistics.median(v),
                                       ' '.join('%.1f' % x for x in v)))


if __name__ == '__main__':
    main()
