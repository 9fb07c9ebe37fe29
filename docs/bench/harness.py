"""What the harnesses in docs/bench share: a plain RESP client of one redis-server, and the
text of a function as crates/dueq/src/protocol/scripts.rs wraps each operation."""
import socket

PROTO = 'crates/dueq/src/protocol/'


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
    wraps it: KEYS, ARGV and struct_unpack set first (lib/base.lua declares them)."""
    return ("\nredis.register_function{function_name = '%s', flags = {%s},\n"
            "callback = function(keys, argv)\nKEYS, ARGV, struct_unpack = keys, argv, struct.unpack\n"
            "%s\nend}\n" % (name, flags, body))


# the helpers of protocol/lib/, in the order scripts.rs loads them
LIB = ['base', 'keys', 'record', 'stats', 'priorities', 'groups', 'limits', 'lifecycle',
       'schedules']


def library(name, functions):
    """A library `name` with the helpers of lib/ at its head and `functions` (texts from
    function())."""
    head = ''.join(open(PROTO + 'lib/%s.lua' % f).read() + '\n' for f in LIB)
    return '#!lua name=%s\n' % name + head + ''.join(functions)
