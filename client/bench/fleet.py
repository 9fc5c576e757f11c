#!/usr/bin/env python3
"""Fleet benchmark: 1, 2 and 3 replicas over a working set larger than one replica's cache
and smaller than the fleet's.

    python3 client/bench/fleet.py [--scenes 8 --size 2048 --cache-mb 96 --epochs 2]

Writes the demo dataset (GDAL-free COGs, 512 px tiles) once, then for N = 1, 2, 3 starts N
daemons (with `[cluster]` when N > 1) and streams `--epochs` aligned epochs from N ranks,
rank r on replica r. Prints per N: store bytes fleet-wide (from `cogfeed_store_bytes_total`),
each replica's tile-cache hit ratio, bytes moved between replicas with the requesters' wait
for them (cold: the owner may be fetching from the store), and wall time. Then the warm
transfer cost: two replicas whose owners hold every tile, no near cache, so each peer
request is a pure decoded-tile transfer.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(HERE))
import cogfeed  # noqa: E402
from services import cluster_toml, cpu_seconds, free_port, wait_port  # noqa: E402

BIN = ROOT / "target" / "release"


def metric(text, name, *labels):
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not re.match(rf"{name}[{{ ]", line):
            continue
        if all(x in line for x in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def start_fleet(n, data, cache_bytes, tmp, near_bytes=None):
    ports = [free_port() for _ in range(n)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs, metrics_ports = [], []
    for i, port in enumerate(ports):
        mport = free_port()
        cluster = cluster_toml(addrs[i], addrs, near_bytes) if n > 1 else ""
        cfg = tmp / f"replica{i}.toml"
        cfg.write_text(f"""[server]
listen = "{addrs[i]}"
metrics_listen = "127.0.0.1:{mport}"
[cache]
capacity_bytes = {cache_bytes}
{cluster}[[datasets]]
name = "demo"
prefix = "{data}/"
""")
        procs.append(subprocess.Popen([BIN / "cogfeed", "serve", "--config", cfg],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        metrics_ports.append(mport)
    for p, proc in zip(ports, procs):
        wait_port(p, proc=proc)
    return addrs, procs, metrics_ports


def stream_epochs(addrs, n, epochs, first_epoch=0):
    delivered = [0] * n

    def rank(r):
        loader = cogfeed.Loader(addrs[r], "demo", sampler="aligned", patch_size=512, batch_size=8,
                                rank=r, world_size=n, seed=3)
        for epoch in range(first_epoch, first_epoch + epochs):
            loader.set_epoch(epoch)
            for b in loader:
                delivered[r] += b.image.nbytes

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(delivered)


def warm_epochs(n, data, tmp):
    """n replicas whose caches hold everything (no near cache): one warm-up epoch, then two
    measured ones. Returns the metric deltas over the measured epochs and the wall time."""
    addrs, procs, mports = start_fleet(n, data, 2 << 30, tmp, near_bytes=1 << 20)
    stream_epochs(addrs, n, 1)
    before = [scrape(p) for p in mports]
    cpu0 = sum(cpu_seconds(p.pid) for p in procs)
    t0 = time.perf_counter()
    delivered = stream_epochs(addrs, n, 2, first_epoch=1)
    wall = time.perf_counter() - t0
    cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu0
    after = [scrape(p) for p in mports]
    for p in procs:
        p.terminate()
        p.wait(15)

    def delta(name, *labels):
        return sum(metric(a, name, *labels) - metric(b, name, *labels) for a, b in zip(after, before))

    return delta, wall, delivered, cpu


def transfer_cost(args, data, tmp):
    """The cost of moving decoded tiles between replicas: the same two warm epochs served by
    one replica from its own cache, and by two replicas where every tile a replica does not
    own comes from its owner's cache; the extra daemon CPU per GB moved is the transfer's
    cost (both ends: encode, copy, HTTP/2, decode)."""
    _, wall1, _, cpu1 = warm_epochs(1, data, tmp)
    two, wall2, delivered, cpu2 = warm_epochs(2, data, tmp)
    peer_bytes = two("cogfeed_peer_bytes_total", 'direction="in"')
    return {
        "warm_transfer": True, "delivered_mb": round(delivered / 1e6),
        "peer_mb": round(peer_bytes / 1e6), "store_mb_after_warmup": round(two("cogfeed_store_bytes_total") / 1e6),
        "daemon_cpu_s_one_replica": round(cpu1, 2), "daemon_cpu_s_two_replicas": round(cpu2, 2),
        "peer_cpu_s_per_gb": round((cpu2 - cpu1) / (peer_bytes / 1e9), 2) if peer_bytes else None,
        "wall_s_one": round(wall1, 2), "wall_s_two": round(wall2, 2),
        "peer_requests": int(two("cogfeed_peer_request_duration_seconds_count")),
    }


def run(n, args, data, tmp):
    addrs, procs, mports = start_fleet(n, data, args.cache_mb << 20, tmp)
    t0 = time.perf_counter()
    delivered = stream_epochs(addrs, n, args.epochs)
    wall = time.perf_counter() - t0
    texts = [scrape(p) for p in mports]
    for p in procs:
        p.terminate()
        p.wait(15)
    store = sum(metric(t, "cogfeed_store_bytes_total") for t in texts)
    peer_bytes = sum(metric(t, "cogfeed_peer_bytes_total", 'direction="in"') for t in texts)
    peer_secs = sum(metric(t, "cogfeed_peer_request_duration_seconds_sum") for t in texts)
    peer_reqs = sum(metric(t, "cogfeed_peer_request_duration_seconds_count") for t in texts)
    hits = [metric(t, "cogfeed_cache_hits_total") for t in texts]
    misses = [metric(t, "cogfeed_cache_misses_total") for t in texts]
    return {
        "replicas": n,
        "wall_s": round(wall, 1),
        "delivered_mb": round(delivered / 1e6),
        "store_mb": round(store / 1e6),
        "hit_ratio": [round(h / (h + m), 3) if h + m else None for h, m in zip(hits, misses)],
        "peer_mb": round(peer_bytes / 1e6),
        "peer_requests": int(peer_reqs),
        "peer_seconds_per_gb": round(peer_secs / (peer_bytes / 1e9), 2) if peer_bytes else None,
        "peer_ms_per_tile": round(1000 * peer_secs / peer_reqs, 2) if peer_reqs else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--cache-mb", type=int, default=96)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--replicas", default="1,2,3")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cogfeed-fleet-"))
    data = tmp / "data"
    subprocess.run([BIN / "cogfeed", "demo-data", data, "--scenes", str(a.scenes), "--size", str(a.size)],
                   check=True, capture_output=True)
    working_set = a.scenes * a.size * a.size * 4 * 2
    print(f"working set {working_set >> 20} MiB decoded, cache {a.cache_mb} MiB per replica, "
          f"{a.epochs} epochs", file=sys.stderr)
    results = []
    for n in [int(x) for x in a.replicas.split(",")]:
        r = run(n, a, data, tmp)
        print(json.dumps(r), flush=True)
        results.append(r)
    r = transfer_cost(a, data, tmp)
    print(json.dumps(r), flush=True)
    results.append(r)
    return results


if __name__ == "__main__":
    main()
