#!/usr/bin/env python3
"""A TCP delay proxy on 127.0.0.1: adds N ms of one-way latency in each direction.

Owns latency injection for the side-by-side benchmark (`tc netem` does not exist here).
Every chunk read from one side is delivered to the other side at arrival + N ms. Delivery is
pipelined: one reader task and one writer task per direction, joined by a queue of
(arrival time, bytes); the writer sleeps only until each chunk's own deadline, so later
chunks are never serialised behind earlier sleeps: latency is added, bandwidth is not cut.
Back-pressure: the queue holds at most QUEUE_CHUNKS reads; past that the reader stops
reading and TCP flow control pushes back on the sender.

A new connection also pays one round trip (2 N ms) before its first bytes reach the server,
as a TCP handshake would (`--no-handshake` turns that off): clients that open connections
per request pay for it, clients that keep them alive do not.

    python3 client/bench/delay_proxy.py --listen 127.0.0.1:8081 --upstream 127.0.0.1:8080 --delay-ms 80

Prints `listening on HOST:PORT` once bound (port 0 picks a free one), and on SIGTERM/SIGINT
or SIGUSR1 a JSON line of counters (connections, bytes each way). Uses uvloop when it is
installed (faster), the standard asyncio loop otherwise.
"""

import argparse
import asyncio
import json
import signal
import socket
import sys

READ_BYTES = 256 * 1024
QUEUE_CHUNKS = 256
STREAM_LIMIT = 4 * 1024 * 1024


class Stats:
    def __init__(self):
        self.connections = 0
        self.up_bytes = 0  # client -> server
        self.down_bytes = 0  # server -> client

    def json(self):
        return json.dumps({"connections": self.connections, "up_bytes": self.up_bytes,
                           "down_bytes": self.down_bytes})


async def pipe(reader, writer, delay, not_before, stats, attr):
    """Copies reader -> writer, each chunk delivered at max(arrival, not_before) + delay."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue(QUEUE_CHUNKS)

    async def read_side():
        try:
            while True:
                data = await reader.read(READ_BYTES)
                await queue.put((max(loop.time(), not_before) + delay, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await queue.put((loop.time(), b""))

    async def write_side():
        try:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                setattr(stats, attr, getattr(stats, attr) + len(data))
                await writer.drain()
        except (ConnectionError, OSError):
            return

    rd = asyncio.ensure_future(read_side())
    try:
        await write_side()
    finally:
        rd.cancel()


async def handle(creader, cwriter, upstream, delay, handshake, stats):
    loop = asyncio.get_running_loop()
    accepted = loop.time()
    stats.connections += 1
    try:
        sreader, swriter = await asyncio.open_connection(*upstream, limit=STREAM_LIMIT)
    except OSError:
        cwriter.close()
        return
    for w in (cwriter, swriter):
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up_not_before = accepted + (2 * delay if handshake else 0)
    try:
        await asyncio.gather(
            pipe(creader, swriter, delay, up_not_before, stats, "up_bytes"),
            pipe(sreader, cwriter, delay, 0.0, stats, "down_bytes"),
            return_exceptions=True,
        )
    finally:
        for w in (cwriter, swriter):
            try:
                w.close()
            except Exception:
                pass


def parse_addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


async def serve(listen, upstream, delay_ms, handshake=True, ready=None, stats=None):
    """Runs until cancelled. `ready(port)` is called once bound."""
    stats = stats or Stats()
    delay = delay_ms / 1000.0
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, upstream, delay, handshake, stats),
        *listen, limit=STREAM_LIMIT, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    if ready:
        ready(port)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--no-handshake", action="store_true", help="no extra round trip on connect")
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    stats = Stats()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
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
