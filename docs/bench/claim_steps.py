#!/usr/bin/env python3
"""Redis time per call of claim.lua and ack.lua, the fixed part step by step (docs/BENCHMARKS.md,
W7, issue 15).

Runs against a redis-server of its own (it FLUSHALLs it: never point it at a shared one):

    redis-server --port 16391 --save '' --daemonize yes
    python3 docs/bench/claim_steps.py 16391 [rounds]

Each variant is a function of a library with the helpers of lib/*.lua at its head, as
crates/dueq/src/protocol/scripts.rs builds it (FUNCTION LOAD, then FCALL), called with the keys
and arguments the library passes: the first keys of SCRIPT_KEYS, as many as the operation's
Span (protocol/keys.rs; harness.py reads both there). Times are Redis's own for the calls
(`INFO commandstats`, `cmdstat_fcall` usec over all of them), so they leave out the socket
work of a round trip, which costs Redis more again (see BENCHMARKS.md). Median of the rounds,
in µs per call:

  ping-cpu-1      Redis CPU (INFO cpu, socket work included) per PING sent one at a time, the
                  way each claim and ack of a worker goes (a round trip each)
  ping-cpu-10     the same with 10 PINGs per write (pipelined)
  nop-0, nop-33   a function that returns at once, with 0 and with claim's keys (33)
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

from harness import PROTO, Redis, flags, function, key, library as make_library, queue_keys

CALLS = 2000


CLAIM_OP, ACK_OP, ENQUEUE_OP = 'leases/claim.lua', 'leases/ack.lua', 'tasks/enqueue.lua'


def library(claim_body):
    return make_library('steps', [
        function('s_claim', claim_body, flags(CLAIM_OP)),
        function('s_ack', open(PROTO + ACK_OP).read(), flags(ACK_OP)),
        function('s_enqueue', open(PROTO + ENQUEUE_OP).read(), flags(ENQUEUE_OP)),
        function('s_nop', 'return 1', "'no-writes'")])


CLAIM = open(PROTO + CLAIM_OP).read()
# where claim-<step> returns (the first line of the step)
STEPS = [('start', 'local K = queue_keys()'), ('keys', 'local max = tonumber'),
         ('cfg', 'local paused ='), ('parse', 'local out = {now'),
         ('defs', "if forget ~= ''"), ('main', 'local room = max - nz'),
         ('tail', 'if by_conc then out[7]')]


def claim_args(max_tasks):
    """A claim's ARGV as the library sends it untracked: max, lease override (0: each task's
    own), claim id, claim id to forget, holder ('' each), no lost claims."""
    return [max_tasks, 0, '', '', '', 0]


# a claim's answer: 12 values (now_ms .. n tasks, m missed ticks), then 6 per task
CLAIM_HEAD, CLAIM_PER_TASK = 12, 6


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
        r('HSET', key(q, 'meta'), 'group_concurrency', per)
    spec = struct.pack('<IHIH', 0, 0, 0, 0) + b'x' * 100
    ek = queue_keys(q, ENQUEUE_OP)
    for _ in range(20):
        # 5 values per task when the batch has a group, else 4
        args = [key(q, 'wake'), 1000, 5 if group else 4]
        for _ in range(1000):
            args += ['', 'kd', 0, spec] + ([group] if group else [])
        got = r('FCALL', 's_enqueue', len(ek), *ek, *args)
        assert got[0] == b'ok', got[:3]
    ck = queue_keys(q, CLAIM_OP)
    ak = queue_keys(q, ACK_OP)
    cycles = 19000 // per
    before = r.fcall_usec()
    for _ in range(cycles):
        got = r('FCALL', 's_claim', len(ck), *ck, *claim_args(1000 if group else per))
        n = int(got[CLAIM_HEAD - 2])
        assert n == per, n
        ack = [key(q, 'wake'), n]
        for i in range(n):
            at = CLAIM_HEAD + CLAIM_PER_TASK * i
            ack += [got[at], got[at + 1]]
        acked = r('FCALL', 's_ack', len(ak), *ak, *ack)
        assert acked[1:] == [1] * n, acked
    return (r.fcall_usec() - before) / (cycles * per)


def main():
    port = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    r = Redis(port)
    res = {}
    empty = queue_keys('empty', CLAIM_OP)
    for _ in range(rounds):
        r('FLUSHALL')
        r('FUNCTION', 'FLUSH')
        r('FUNCTION', 'LOAD', library(CLAIM))
        res.setdefault('ping-cpu-1', []).append(ping_cpu(r, 1))
        res.setdefault('ping-cpu-10', []).append(ping_cpu(r, 10))
        res.setdefault('nop-0', []).append(repeat(r, ['FCALL', 's_nop', 0]))
        res.setdefault('nop-%d' % len(empty), []).append(
            repeat(r, ['FCALL', 's_nop', len(empty), *empty]))
        for step, line in STEPS:
            body = CLAIM.replace(line, 'do return {0} end\n' + line, 1)
            assert body != CLAIM, step
            r('FUNCTION', 'LOAD', 'REPLACE', library(body))
            res.setdefault('claim-' + step, []).append(
                repeat(r, ['FCALL', 's_claim', len(empty), *empty, *claim_args(1000)]))
        r('FUNCTION', 'LOAD', 'REPLACE', library(CLAIM))
        res.setdefault('claim-empty', []).append(
            repeat(r, ['FCALL', 's_claim', len(empty), *empty, *claim_args(1000)]))
        res.setdefault('task-10', []).append(cycles(r, 'A'))
        res.setdefault('task-10-plain', []).append(cycles(r, ''))
        res.setdefault('task-1000-plain', []).append(cycles(r, '', 1000))
    r('FUNCTION', 'DELETE', 'steps')
    for name, v in res.items():
        print('%-16s %7.1f   (%s)' % (name, statistics.median(v),
                                       ' '.join('%.1f' % x for x in v)))


if __name__ == '__main__':
    main()
