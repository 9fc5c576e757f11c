#!/usr/bin/env python3
"""Daemon memory under load: N concurrent streams, half of them reading slowly.

    python3 client/python/scripts/memory_under_load.py [--streams 64] [--seconds 20]

Starts `cogfeed serve` on the demo data with a 256 MiB tile cache, opens the streams from
threads (fast ones read as fast as they can, slow ones sleep 0.5 s per batch), samples the
daemon's RSS every 0.2 s, and prints peak RSS against the bound it should respect:
cache capacity + streams x (queue + 6) batches + the look-ahead budget (512 MiB, shared)
+ base RSS + 64 MiB (see the per-stream accounting below). Also reports the fast streams' throughput alone (the fast half, nobody
else) and beside the slow half; slow streams still cost the daemon 2 batches/s each.
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
    ap.add_argument("--queue", type=int, default=4, help="[limits] stream_queue_batches")
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
stream_queue_batches = {a.queue}
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

    def run(n_streams, with_slow, seconds):
        """Streams i = 0..n; odd ones sleep 0.5 s per batch when `with_slow`. Returns
        (peak RSS, fast streams' MB/s in total, slow streams' MB/s in total)."""
        stop = threading.Event()
        fast_bytes = [0] * n_streams
        slow_bytes = [0] * n_streams

        def worker(i):
            slow = with_slow and i % 2 == 1
            loader = cogfeed.Loader(addr, "demo", batch_size=a.batch_size, samples_per_epoch=10**9, seed=i,
                                    job="slow" if slow else "fast")
            for b in loader:
                if stop.is_set():
                    return
                if slow:
                    slow_bytes[i] += b.image.nbytes
                    time.sleep(0.5)
                else:
                    fast_bytes[i] += b.image.nbytes

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_streams)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        peak = 0
        while time.perf_counter() - t0 < seconds:
            peak = max(peak, rss(daemon.pid))
            time.sleep(0.2)
        elapsed = time.perf_counter() - t0
        stop.set()
        for t in threads:
            t.join(10)
        return peak, sum(fast_bytes) / elapsed / 1e6, sum(slow_bytes) / elapsed / 1e6

    # The fast half alone, then the same fast streams beside as many slow ones.
    half = a.streams // 2
    _, fast_only, _ = run(half, False, a.seconds / 2)
    peak, fast_loaded, slow_loaded = run(a.streams, True, a.seconds)
    daemon.terminate()
    daemon.wait(15)
    # Per stream: the queue, the batch blocked on a full queue, the one being assembled, the
    # look-ahead (prefetch = 2 batches' samples by default) and two in transport (tonic's
    # encode buffer and HTTP/2's send buffer).
    per_stream_batches = a.queue + 1 + 1 + 2 + 2
    per_stream = per_stream_batches * batch_bytes
    fixed = 64 << 20
    budget = 512 << 20  # [limits] prefetch_budget_bytes: look-ahead beyond the floors, all streams
    bound = (256 << 20) + a.streams * per_stream + budget + base + fixed
    print(json.dumps({
        "streams": a.streams, "seconds": a.seconds, "base_rss_mb": round(base / 2**20),
        "peak_rss_mb": round(peak / 2**20), "bound_mb": round(bound / 2**20),
        "per_stream_batches": per_stream_batches, "per_stream_bound_mb": round(per_stream / 2**20, 1),
        "prefetch_budget_mb": budget >> 20, "allowed_overhead_mb": fixed >> 20,
        "above_cache_and_streams_mb": round((peak - (256 << 20) - a.streams * per_stream) / 2**20),
        "within_bound": peak <= bound,
        f"fast_{half}_streams_alone_mb_per_s": round(fast_only),
        f"fast_{half}_streams_beside_{a.streams - half}_slow_mb_per_s": round(fast_loaded),
        "slow_streams_mb_per_s": round(slow_loaded),
        "fast_ratio": round(fast_loaded / fast_only, 2) if fast_only else None,
        "delivered_ratio": round((fast_loaded + slow_loaded) / fast_only, 2) if fast_only else None,
    }))


if __name__ == "__main__":
    main()
