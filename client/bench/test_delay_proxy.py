"""Smoke test of delay_proxy.py (localhost only, a few seconds): it adds at least N ms each
way (plus one round trip on connect), keeps bytes intact, pipelines (latency is added once,
not once per chunk), and goes idle when a client drops a connection mid-response."""

import hashlib
import os
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parent / "delay_proxy.py"
DELAY_MS = 50


class Echo(socketserver.BaseRequestHandler):
    """Echoes; a connection that starts with exactly b"STREAM" gets a paced 3.2 MB stream."""

    def handle(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = True
        while True:
            data = self.request.recv(1 << 16)
            if not data:
                return
            if first and data == b"STREAM":
                try:
                    for _ in range(100):  # 3.2 MB over about 0.3 s: no back-pressure
                        self.request.sendall(bytes(32 * 1024))
                        time.sleep(0.003)
                except OSError:
                    return
                continue
            first = False
            self.request.sendall(data)


class Proxy:
    pid = None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def proxy():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = server.server_address[1]
    proc = subprocess.Popen([sys.executable, str(PROXY), "--upstream", f"127.0.0.1:{upstream}",
                             "--delay-ms", str(DELAY_MS)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("listening on"), line
    Proxy.pid = proc.pid
    yield int(line.rsplit(":", 1)[1])
    proc.terminate()
    proc.wait(10)
    server.shutdown()


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(10)
    return s


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        assert chunk, "connection closed early"
        buf += chunk
    return bytes(buf)


def test_adds_latency_each_way_and_a_handshake(proxy):
    d = DELAY_MS / 1000
    with connect(proxy) as s:
        t = time.perf_counter()
        s.sendall(b"x")
        assert recv_exact(s, 1) == b"x"
        first = time.perf_counter() - t
        t = time.perf_counter()
        s.sendall(b"y")
        assert recv_exact(s, 1) == b"y"
        second = time.perf_counter() - t
    assert first >= 4 * d * 0.98, first  # handshake round trip + request + response
    assert second >= 2 * d * 0.98, second
    assert second < 2 * d + 1.0, second  # generous: a loaded CI machine is slow, not wrong


def test_bytes_intact(proxy):
    payload = os.urandom(8 << 20)
    with connect(proxy) as s:
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        back = recv_exact(s, len(payload))
        sender.join()
    assert hashlib.sha256(back).digest() == hashlib.sha256(payload).digest()


def test_pipelined_not_serialised(proxy):
    d = DELAY_MS / 1000
    n = 20
    with connect(proxy) as s:
        s.sendall(b"w")
        recv_exact(s, 1)  # connection warm: no handshake any more
        t = time.perf_counter()
        for i in range(n):
            s.sendall(bytes([i]))
            time.sleep(0.005)
        got = recv_exact(s, n)
        total = time.perf_counter() - t
    assert got == bytes(range(n))
    # Serialised delays would take n * 2d = 2 s; pipelined: 2d + the sending time.
    assert total < 1.0, total  # far below n * 2d = 2 s, even on a loaded machine


def test_idle_after_client_drops_mid_response(proxy):
    with connect(proxy) as s:
        s.sendall(b"STREAM")
        recv_exact(s, 256 * 1024)  # the response is flowing
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
    time.sleep(0.6)  # the server's remaining bytes arrive and are dropped
    before = cpu_seconds(Proxy.pid)
    time.sleep(1.0)
    assert cpu_seconds(Proxy.pid) - before < 0.1, "the proxy keeps spinning on a dead connection"
