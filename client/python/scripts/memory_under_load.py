#!/usr/bin/env python3
"""Daemon memory under load: N concurrent streams, half of them reading slowly.

    python3 client/python/scripts/memory_under_load.py [--streams 64] [--seconds 20]

Starts `cogfeed serve` on the demo data with a 256 MiB tile cache, opens the streams from
threads (fast ones read as fast as they can, slow ones sleep 0.5 s per batch), samples the
daemon's RSS every 0.2 s, and prints peak RSS against the bound it should respect:
cache capacity + streams x (queue + prefetch + HTTP/2 window) + base RSS. Also reports
the fast streams' throughput alone and under load.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "client" / "python"))
import cogfeed  # noqa: E402

BIN = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cogfeed-mem-"))
    subprocess.run([BIN / "cogfeed", "demo-data", tmp / "demo"], check=True, capture_output=True)
    cfg = tmp / "cogfeed.toml"
    cfg.write_text(f"""
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
[cache]
capacity_bytes = {256 << 20}
[limits]
stream_queue_batches = 4
[[datasets]]
name = "demo"
prefix = "{tmp / 'demo'}/"
labels = "{tmp / 'demo'}/labels/{{stem}}.tif"
""")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen([BIN / "cogfeed", "serve", "--config", cfg, "--listen", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in daemon.stderr:
        if "grpc listening" in line:
            break
    addr = f"127.0.0.1:{port}"
    base = rss(daemon.pid)
    batch_bytes = a.batch_size * 4 * 256 * 256 * 2

    def fast_alone(seconds):
        loader = cogfeed.Loader(addr, "demo", batch_size=a.batch_size, samples_per_epoch=10**9, job="fast")
        t, n = time.perf_counter(), 0
        for b in loader:
            n += b.image.nbytes
            if time.perf_counter() - t > seconds:
                break
        return n / (time.perf_counter() - t) / 1e6

    alone = fast_alone(5)
    stop = threading.Event()
    fast_bytes = [0] * a.streams

    def worker(i):
        slow = i % 2 == 1
        loader = cogfeed.Loader(addr, "demo", batch_size=a.batch_size, samples_per_epoch=10**9, seed=i,
                                job="slow" if slow else "fast")
        for b in loader:
            if stop.is_set():
                return
            if slow:
                time.sleep(0.5)
            else:
                fast_bytes[i] += b.image.nbytes

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(a.streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    peak = 0
    while time.perf_counter() - t0 < a.seconds:
        peak = max(peak, rss(daemon.pid))
        time.sleep(0.2)
    elapsed = time.perf_counter() - t0
    stop.set()
    daemon.terminate()
    daemon.wait(15)
    per_stream = 4 * batch_bytes + 16 * 4 * 256 * 256 * 2 + (8 << 20)
    bound = (256 << 20) + a.streams * per_stream + base
    fast_total = sum(fast_bytes) / elapsed / 1e6
    print(json.dumps({
        "streams": a.streams, "seconds": round(elapsed, 1), "base_rss_mb": round(base / 2**20),
        "peak_rss_mb": round(peak / 2**20), "bound_mb": round(bound / 2**20),
        "per_stream_bound_mb": round(per_stream / 2**20, 1), "within_bound": peak <= bound,
        "fast_alone_mb_per_s": round(alone), "fast_streams_total_mb_per_s_under_load": round(fast_total),
    }))


if __name__ == "__main__":
    main()
