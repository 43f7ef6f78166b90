#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A hostile Redis for tests: speaks RESP on 127.0.0.1 and answers what a test needs.

Its first stdout line is "port N". It counts connections and commands (and records every AUTH
with its arguments) and writes them as JSON to --stats FILE (rewritten whenever they change, at
most every --stats-every seconds, and once more at exit), and prints them on stdout at SIGTERM.

Behaviour comes from modes, each a flag. A mode is a class below registered with @mode: it adds
its own flags and may replace the answer to any command, change INFO's text, or refuse a client
before it is authenticated. A new test adds a class; nothing else changes.

Stdlib only: the runtime tests run it with the system's python3.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time

MODES = []


def mode(cls):
    MODES.append(cls)
    return cls


# RESP encoders. Everything the server writes goes through these, as bytes.
def simple(s):
    return b"+" + _b(s) + b"\r\n"


def error(s):
    return b"-" + _b(s) + b"\r\n"


def integer(n):
    return b":" + str(n).encode() + b"\r\n"


def bulk(s):
    if s is None:
        return b"$-1\r\n"
    s = _b(s)
    return b"$" + str(len(s)).encode() + b"\r\n" + s + b"\r\n"


def array(items):
    return b"*" + str(len(items)).encode() + b"\r\n" + b"".join(items)


def _b(s):
    return s if isinstance(s, bytes) else str(s).encode("latin-1")


NO_REPLY = object()  # a handler's answer that sends nothing


class Stats:
    """What the server saw; written to a file so that a test can read it while the server runs."""

    def __init__(self, path, every):
        self.lock = threading.Lock()
        self.path = path
        self.every = every
        self.data = {"connections": 0, "open": 0, "commands": 0, "by_command": {}, "auth": []}
        self.dirty = True

    def bump(self, key, n=1):
        with self.lock:
            self.data[key] += n
            self.dirty = True

    def command(self, args):
        name = args[0].decode("latin-1").upper() if args else ""
        with self.lock:
            self.data["commands"] += 1
            by = self.data["by_command"]
            by[name] = by.get(name, 0) + 1
            if name == "AUTH":
                self.data["auth"].append([a.decode("latin-1") for a in args[1:]])
            self.dirty = True

    def snapshot(self):
        with self.lock:
            self.dirty = False
            return json.loads(json.dumps(self.data))

    def write(self):
        if not self.path:
            return
        data = self.snapshot()
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def writer(self):
        while True:
            time.sleep(self.every)
            if self.dirty:
                self.write()


class Behaviour:
    """The answers of a well-behaved Redis 7.0, which modes then spoil."""

    def __init__(self, opts):
        self.opts = opts
        self.handlers = {
            "PING": lambda c, a: simple("PONG"),
            "AUTH": lambda c, a: simple("OK"),
            "HELLO": self.hello,
            "INFO": self.info,
            "CONFIG": self.config,
            "LATENCY": lambda c, a: array([]),
            "CLIENT": self.client,
            "QUIT": lambda c, a: simple("OK"),
        }
        # Each: fn(conn, args) -> reply bytes, or None to let the command through.
        self.gates = []
        # Each: fn(sections) -> sections; sections is a list of (title, [line bytes]).
        self.info_filters = []
        self.config = dict(
            {
                "disable-thp": "yes",
                "repl-diskless-sync": "yes",
                "client-output-buffer-limit": "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
                "repl-timeout": "60",
                "repl-diskless-sync-delay": "5",
            }
        )

    def hello(self, conn, args):
        return array([bulk("server"), bulk("redis"), bulk("version"), bulk("7.0.15"), bulk("proto"), integer(2)])

    def info_sections(self):
        pid = self.opts.process_id if self.opts.process_id else os.getpid()
        return [
            ("Server", [b"redis_version:7.0.15", b"process_id:%d" % pid, b"executable:/usr/bin/redis-server"]),
            (
                "Persistence",
                [b"rdb_bgsave_in_progress:0", b"aof_rewrite_in_progress:0", b"current_cow_size:0",
                 b"current_fork_perc:0.00", b"current_save_keys_processed:0", b"rdb_last_cow_size:0"],
            ),
            ("Stats", [b"total_forks:0", b"latest_fork_usec:0", b"sync_full:0"]),
            ("Replication", [b"role:master", b"connected_slaves:0", b"master_repl_offset:0"]),
        ]

    def info(self, conn, args):
        sections = self.info_sections()
        for f in self.info_filters:
            sections = f(sections)
        text = b""
        for title, lines in sections:
            text += b"# " + _b(title) + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"
        return bulk(text)

    def config(self, conn, args):
        if len(args) < 3 or args[1].upper() != b"GET":
            return error("ERR unsupported CONFIG subcommand")
        key = args[2].decode("latin-1")
        if key in self.config:
            return array([bulk(key), bulk(self.config[key])])
        return array([])

    def client(self, conn, args):
        if len(args) >= 2 and args[1].upper() == b"LIST":
            return bulk("")
        return simple("OK")

    def answer(self, conn, args):
        for gate in self.gates:
            refused = gate(conn, args)
            if refused is not None:
                return refused
        name = args[0].decode("latin-1").upper()
        handler = self.handlers.get(name)
        if handler is None:
            return error("ERR unknown command '%s'" % name.lower())
        return handler(conn, args)


@mode
class NopermInfo:
    """INFO refused as to an ACL user with -@dangerous (or INFO renamed)."""

    flag = "--noperm-info"

    @staticmethod
    def add(parser):
        parser.add_argument(NopermInfo.flag, action="store_true", help=NopermInfo.__doc__)

    @staticmethod
    def install(b, opts):
        if not opts.noperm_info:
            return
        refuse = lambda c, a: error("NOPERM this user has no permissions to run the 'info' command")
        b.handlers["INFO"] = refuse


@mode
class Refuse:
    """-NOPERM to every command named (repeatable: --refuse LATENCY --refuse CONFIG)."""

    @staticmethod
    def add(parser):
        parser.add_argument("--refuse", action="append", default=[], metavar="COMMAND", help=Refuse.__doc__)

    @staticmethod
    def install(b, opts):
        for name in opts.refuse:
            text = "NOPERM this user has no permissions to run the '%s' command" % name.lower()
            b.handlers[name.upper()] = lambda c, a, text=text: error(text)


@mode
class HugeInfo:
    """INFO's reply padded to BYTES bytes (a valid INFO otherwise)."""

    @staticmethod
    def add(parser):
        parser.add_argument("--huge-info", type=int, metavar="BYTES", default=0, help=HugeInfo.__doc__)

    @staticmethod
    def install(b, opts):
        if not opts.huge_info:
            return
        line = b"x" * 1000
        count = max(1, opts.huge_info // 1000)
        pad = [b"padding%d:%s" % (i, line[: 1000 - len(b"padding%d:" % i) - 2]) for i in range(count)]
        b.info_filters.append(lambda sections: sections + [("Padding", pad)])


@mode
class Replicas:
    """INFO replication lists N online replicas."""

    @staticmethod
    def add(parser):
        parser.add_argument("--replicas", type=int, metavar="N", default=0, help=Replicas.__doc__)

    @staticmethod
    def install(b, opts):
        if not opts.replicas:
            return
        lines = [b"role:master", b"connected_slaves:%d" % opts.replicas]
        for k in range(opts.replicas):
            ip = "10.%d.%d.%d" % ((k >> 16) & 255, (k >> 8) & 255, k & 255)
            lines.append(b"slave%d:ip=%s,port=%d,state=online,offset=1000,lag=0" % (k, ip.encode(), 6379 + k % 1000))
        lines.append(b"master_repl_offset:1000")

        def replace(sections):
            return [(t, lines if t == "Replication" else ls) for t, ls in sections]

        b.info_filters.append(replace)


@mode
class InvalidUtf8:
    """INFO fields and error replies hold 0xFF and control bytes."""

    @staticmethod
    def add(parser):
        parser.add_argument("--invalid-utf8", action="store_true", help=InvalidUtf8.__doc__)

    @staticmethod
    def install(b, opts):
        if not opts.invalid_utf8:
            return
        bad = b"\xff\xfe\x01\x1b[31m\x7f"

        def spoil(sections):
            out = []
            for title, lines in sections:
                spoilt = []
                for line in lines:
                    if line.startswith(b"redis_version:") or line.startswith(b"executable:"):
                        line += bad
                    spoilt.append(line)
                out.append((title, spoilt))
            out.append(("Bad\xff", [b"field\xff:" + bad, b"slave0:ip=" + bad + b",port=1,state=" + bad]))
            return out

        b.info_filters.append(spoil)
        b.handlers["LATENCY"] = lambda c, a: error(b"ERR \xff\x00\x1b[2J" + b"y" * 600)
        for key in list(b.config):
            b.config[key] = b.config[key] + "\xff\x01"


@mode
class RequireAuth:
    """-NOAUTH to everything until AUTH (any password, or --password's); every AUTH is recorded."""

    @staticmethod
    def add(parser):
        parser.add_argument("--require-auth", action="store_true", help=RequireAuth.__doc__)
        parser.add_argument("--password", help="with --require-auth: the only password accepted")

    @staticmethod
    def install(b, opts):
        if not opts.require_auth:
            return

        def auth(conn, args):
            if len(args) < 2:
                return error("ERR wrong number of arguments for 'auth' command")
            if opts.password is not None and args[-1].decode("latin-1") != opts.password:
                return error("WRONGPASS invalid username-password pair or user is disabled.")
            conn.authenticated = True
            return simple("OK")

        def gate(conn, args):
            name = args[0].upper()
            if conn.authenticated or name in (b"AUTH", b"QUIT"):
                return None
            return error("NOAUTH Authentication required.")

        b.handlers["AUTH"] = auth
        b.gates.append(gate)


@mode
class Silent:
    """Accepts connections and reads commands, never answers."""

    @staticmethod
    def add(parser):
        parser.add_argument("--silent", action="store_true", help=Silent.__doc__)

    @staticmethod
    def install(b, opts):
        if opts.silent:
            b.gates.append(lambda c, a: NO_REPLY)


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.authenticated = False

    def read_command(self):
        """The next command's arguments (a RESP array of bulk strings, or an inline line); None at EOF."""
        while True:
            args, used = parse_command(self.buf)
            if args is not None:
                self.buf = self.buf[used:]
                if args:
                    return args
                continue
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data


def parse_command(buf):
    """(args, bytes used) of the first whole command in buf, or (None, 0) when it is not whole yet."""
    if not buf:
        return None, 0
    if buf[:1] != b"*":
        nl = buf.find(b"\n")
        if nl < 0:
            return None, 0
        return buf[:nl].strip().split(), nl + 1
    nl = buf.find(b"\r\n")
    if nl < 0:
        return None, 0
    count = int(buf[1:nl])
    pos = nl + 2
    args = []
    for _ in range(max(count, 0)):
        nl = buf.find(b"\r\n", pos)
        if nl < 0 or buf[pos : pos + 1] != b"$":
            return None, 0
        n = int(buf[pos + 1 : nl])
        start = nl + 2
        if len(buf) < start + n + 2:
            return None, 0
        args.append(buf[start : start + n])
        pos = start + n + 2
    return args, pos


def serve_client(sock, behaviour, stats):
    conn = Connection(sock)
    try:
        while True:
            args = conn.read_command()
            if args is None:
                return
            stats.command(args)
            reply = behaviour.answer(conn, args)
            if reply is NO_REPLY:
                continue
            sock.sendall(reply)
            if args[0].upper() == b"QUIT":
                return
    except (OSError, ValueError):
        return
    finally:
        stats.bump("open", -1)
        sock.close()


def main():
    parser = argparse.ArgumentParser(description="A hostile Redis for tests.")
    parser.add_argument("--port", type=int, default=0, help="0: pick a free one (printed as 'port N')")
    parser.add_argument("--stats", metavar="FILE", help="write what was seen here, as JSON")
    parser.add_argument("--stats-every", type=float, default=0.1, metavar="SECONDS")
    parser.add_argument("--process-id", type=int, default=0, help="INFO's process_id (default: our own pid)")
    for m in MODES:
        m.add(parser)
    opts = parser.parse_args()

    behaviour = Behaviour(opts)
    for m in MODES:
        m.install(behaviour, opts)
    stats = Stats(opts.stats, opts.stats_every)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", opts.port))
    listener.listen(128)

    def stop(signum, frame):
        stats.write()
        print(json.dumps(stats.snapshot()), flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    stats.write()
    threading.Thread(target=stats.writer, daemon=True).start()
    print("port %d" % listener.getsockname()[1], flush=True)
    while True:
        sock, _ = listener.accept()
        stats.bump("connections")
        stats.bump("open")
        threading.Thread(target=serve_client, args=(sock, behaviour, stats), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
