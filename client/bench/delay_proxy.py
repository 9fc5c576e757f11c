#!/usr/bin/env python3
"""A TCP delay proxy on 127.0.0.1: adds N ms of one-way latency in each direction.

Owns latency injection for the side-by-side benchmark (`tc netem` does not exist here).
Every chunk read from one side is delivered to the other side at its arrival time + N ms.
Delivery is pipelined: each direction has a queue of (due time, bytes) and one timer that
fires at the head's due time and writes every chunk that is due, so later chunks are never
serialised behind earlier waits: latency is added, bandwidth is not cut. (asyncio
protocols and `call_at` rather than a task per direction: same semantics, about half the
CPU per byte, which matters on a 2-core machine where the proxy shares the cores.)
Back-pressure: past QUEUE_BYTES queued in a direction, or when the receiving socket's
buffer is full, the proxy stops reading from the sender and TCP flow control pushes back.

A new connection also pays one round trip (2 N ms) before its first bytes reach the server,
as a TCP handshake would (`--no-handshake` turns that off): clients that open connections
per request pay for it, clients that keep them alive do not.

    python3 client/bench/delay_proxy.py --listen 127.0.0.1:8081 --upstream 127.0.0.1:8080 --delay-ms 80

Prints `listening on HOST:PORT` once bound (port 0 picks a free one), and on SIGUSR1 or at
exit (SIGTERM, SIGINT) a JSON line of counters (connections, bytes each way). Uses uvloop
when it is installed (faster), the standard asyncio loop otherwise.
"""

import argparse
import asyncio
import collections
import json
import signal
import socket
import sys

QUEUE_BYTES = 32 * 1024 * 1024
EOF, CLOSE = object(), object()


class Stats:
    def __init__(self):
        self.connections = 0
        self.up_bytes = 0  # client -> server
        self.down_bytes = 0  # server -> client

    def json(self):
        return json.dumps({"connections": self.connections, "up_bytes": self.up_bytes,
                           "down_bytes": self.down_bytes})


class Direction:
    """Bytes from one transport to another, each chunk due at arrival + delay."""

    def __init__(self, loop, delay, not_before, stats, attr, done):
        self.loop, self.delay, self.not_before = loop, delay, not_before
        self.stats, self.attr, self.done = stats, attr, done
        self.queue = collections.deque()
        self.queued = 0
        self.timer = None
        self.src = self.dst = None
        self.src_paused = self.dst_full = self.finished = False

    def push(self, item):
        if self.finished:  # the receiver is gone: drop what still arrives
            return
        now = self.loop.time()
        due = max(now, self.not_before) + self.delay
        if not self.queue and due <= now and self.dst is not None and not self.dst_full:
            self.deliver(item)  # no delay to add: write through
            return
        self.queue.append((due, item))
        if isinstance(item, bytes):
            self.queued += len(item)
            if self.queued > QUEUE_BYTES and not self.src_paused and self.src is not None:
                self.src.pause_reading()
                self.src_paused = True
        if self.timer is None:
            self.schedule()

    def schedule(self):
        if self.queue and self.dst is not None and not self.dst_full and self.timer is None and not self.finished:
            self.timer = self.loop.call_at(self.queue[0][0], self.flush)

    def flush(self):
        self.timer = None
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now and not self.dst_full and not self.finished:
            _, item = self.queue.popleft()
            if isinstance(item, bytes):
                self.queued -= len(item)
            self.deliver(item)
        self.maybe_resume()
        self.schedule()

    def deliver(self, item):
        if self.dst.is_closing():
            # The receiver went away (a client stopped mid-read): nothing queued can reach it.
            self.finish()
            return
        if item is EOF:
            if self.dst.can_write_eof():
                try:
                    self.dst.write_eof()
                except OSError:
                    pass  # the peer reset the connection first: nothing left to half-close
            self.finish()
        elif item is CLOSE:
            self.dst.close()
            self.finish()
        else:
            self.dst.write(item)
            setattr(self.stats, self.attr, getattr(self.stats, self.attr) + len(item))

    def finish(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.finished = True
        self.queue.clear()
        self.done()

    def maybe_resume(self):
        if self.src_paused and self.queued < QUEUE_BYTES // 2 and not self.dst_full:
            self.src_paused = False
            self.src.resume_reading()

    def set_dst(self, transport):
        self.dst = transport
        self.schedule()

    def dst_paused(self, full):
        self.dst_full = full
        if full:
            if not self.src_paused and self.src is not None:
                self.src.pause_reading()
                self.src_paused = True
        else:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.maybe_resume()
            self.flush()


class Side(asyncio.Protocol):
    """One socket of a proxied connection: feeds `out`, is written by `inbound`."""

    def __init__(self, out, inbound):
        self.out, self.inbound = out, inbound

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (AttributeError, OSError):
            pass
        self.out.src = transport
        self.inbound.set_dst(transport)

    def data_received(self, data):
        self.out.push(data)

    def eof_received(self):
        self.out.push(EOF)
        return True  # keep the other half open

    def connection_lost(self, exc):
        if not self.out.finished:
            self.out.push(CLOSE)
        if not self.inbound.finished:
            self.inbound.finish()

    def pause_writing(self):
        self.inbound.dst_paused(True)

    def resume_writing(self):
        self.inbound.dst_paused(False)


def handler(loop, upstream, delay, handshake, stats):
    """A protocol factory for accepted connections: connects upstream, pipes both ways."""

    def make():
        stats.connections += 1
        state = {"open": 2}
        sides = []

        def done():
            state["open"] -= 1
            if state["open"] == 0:
                for s in sides:
                    s.transport.close()

        now = loop.time()
        up = Direction(loop, delay, now + (2 * delay if handshake else 0.0), stats, "up_bytes", done)
        down = Direction(loop, delay, 0.0, stats, "down_bytes", done)
        client = Side(up, down)
        sides.append(client)

        async def connect():
            try:
                _, server = await loop.create_connection(lambda: Side(down, up), *upstream)
                sides.append(server)
            except OSError:
                client.transport.close()

        loop.create_task(connect())
        return client

    return make


async def serve(listen, upstream, delay_ms, handshake=True, ready=None, stats=None):
    """Runs until cancelled. `ready(port)` is called once bound."""
    loop = asyncio.get_running_loop()
    stats = stats or Stats()
    server = await loop.create_server(handler(loop, upstream, delay_ms / 1000.0, handshake, stats),
                                      *listen, backlog=1024)
    if ready:
        ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def parse_addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--no-handshake", action="store_true", help="no extra round trip on connect")
    a = ap.parse_args()
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stats = Stats()
    task = loop.create_task(serve(parse_addr(a.listen), parse_addr(a.upstream), a.delay_ms,
                                  not a.no_handshake,
                                  ready=lambda p: print(f"listening on 127.0.0.1:{p}", flush=True),
                                  stats=stats))
    loop.add_signal_handler(signal.SIGUSR1, lambda: print(stats.json(), flush=True))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        pass
    print(stats.json(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
