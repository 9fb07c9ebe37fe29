"""What the harnesses in docs/bench share: a plain RESP client of one redis-server, the text
of a function as crates/dueq/src/protocol/scripts.rs wraps each operation, and the keys each
operation takes as the library passes them (SCRIPT_KEYS and Span in protocol/keys.rs, the
registry in scripts.rs), read from those files so that they stay the library's."""
import re
import socket

PROTO = 'crates/dueq/src/protocol/'


def _source(path):
    with open(PROTO + path) as f:
        return f.read()


class Redis:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.buf = b''

    def _line(self):
        while b'\r\n' not in self.buf:
            self.buf += self.s.recv(1 << 20)
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b'+':
            return rest.decode()
        if kind == b'-':
            raise RuntimeError(rest.decode())
        if kind == b':':
            return int(rest)
        if kind == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 20)
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b'*':
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError('unexpected reply %r' % line)

    def __call__(self, *args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        self.s.sendall(b''.join(out))
        return self._read()

    def cpu(self):
        """Redis CPU so far (`INFO cpu`, sys + user), s."""
        info = self('INFO', 'cpu').decode().split('\r\n')
        d = dict(line.split(':', 1) for line in info if ':' in line)
        return float(d['used_cpu_sys']) + float(d['used_cpu_user'])

    def fcall_usec(self):
        """Redis's own time in `FCALL` so far (`INFO commandstats`), µs."""
        for line in self('INFO', 'commandstats').decode().split('\r\n'):
            if line.startswith('cmdstat_fcall:'):
                fields = dict(p.split('=') for p in line.split(':', 1)[1].split(','))
                return int(fields['usec'])
        return 0


def function(name, body, flags=''):
    """`body` (an operation file's text) registered as function `name`, wrapped as scripts.rs
    wraps it in a release build: KEYS, ARGV and struct_unpack set first (lib/base.lua declares
    them), then an empty line where a test build's clock goes."""
    return ("\nredis.register_function{function_name = '%s', flags = {%s},\n"
            "callback = function(keys, argv)\n"
            "KEYS, ARGV, struct_unpack = keys, argv, struct.unpack\n"
            "\n%s\nend}\n" % (name, flags, body))


_SCRIPTS = _source('scripts.rs')
_KEYS_RS = _source('keys.rs')

# the helpers of protocol/lib/ (`LIB` in scripts.rs), in the order scripts.rs loads them
LIB = re.findall(r'\("(lib/\w+\.lua)", include_str!', _SCRIPTS)
assert LIB and LIB[0] == 'lib/base.lua', LIB

# a queue's keys in the one order every operation on a queue takes them (keys.rs)
SCRIPT_KEYS = re.findall(
    r'"([^"]+)"', re.search(r'SCRIPT_KEYS: \[&str; \d+\] = \[(.*?)\];', _KEYS_RS, re.S)[1])
# how many of them each `Span` takes (a prefix); `All` takes every one
_SPAN = re.search(r'enum Span \{(.*?)\n\}', _KEYS_RS, re.S)[1]
SPANS = {name: int(n) for name, n in re.findall(r'^\s*(\w+) = (\d+),', _SPAN, re.M)}
SPANS['All'] = len(SCRIPT_KEYS)
assert 'active' in SCRIPT_KEYS and 'Claims' in SPANS, (SCRIPT_KEYS, SPANS)

# the registry of scripts.rs: operation file -> (its Span, its flags)
_FLAGS = dict(re.findall(r'^const (READS|DRAINS|ADDS): &str = "(.*)";', _SCRIPTS, re.M))
OPS = {f: (span, _FLAGS[kind]) for f, span, kind in
       re.findall(r'^\s*\w+ => "([\w/]+\.lua)", Span::(\w+), (\w+);', _SCRIPTS, re.M)}
assert 'leases/claim.lua' in OPS, OPS


def flags(op):
    """The flags the registry gives operation file `op` (`leases/claim.lua`)."""
    return OPS[op][1]


def key(q, name):
    """Key `name` (a name of SCRIPT_KEYS, or `wake`) of queue `q` (one partition, hash tag
    `{q}`)."""
    return 'dueq:{%s}:%s' % (q, name)


def queue_keys(q, op):
    """The keys a call of operation file `op` passes for queue `q`, as call.rs passes them: the
    first ones of SCRIPT_KEYS, as many as the operation's Span."""
    return [key(q, k) for k in SCRIPT_KEYS[:SPANS[OPS[op][0]]]]


def library(name, functions):
    """A library `name` with the helpers of lib/ at its head and `functions` (texts from
    function()), as scripts.rs builds dueq's."""
    head = ''.join(_source(f) + '\n' for f in LIB)
    return '#!lua name=%s\n' % name + head + ''.join(functions)
