#!/usr/bin/env python3
"""A fleet serving the published multimodal sample at archive scale: store reads of 3 replicas
against one daemon on the same epoch (issue 28, item 6).

    python3 client/bench/fleet_map.py [--data DIR] [--side 2048] [--samples 8192]
        [--cache-fraction 3] [--setups one,fleet-split,fleet] [--runs 1] [--json OUT]

The archive is `archive_bench.py`'s (`sample_bench.py`'s writer: one COG per band and date, 1024²
DEFLATE + predictor 2 tiles written by GDAL, two overlapping Sentinel-2 tiles x 16 dates x 10 bands,
Sentinel-1, a 1 m land cover), read from local files. One epoch of `--samples` in `order = "local"`
(the default dial) is streamed as 3 ranks (world size 3, batch 16, the published sample), at once:

- `one`: one daemon, a tile cache of the decoded archive / `--cache-fraction`, all three ranks on it;
- `fleet-split`: three replicas (`[cluster]`, static peers), each a third of that cache (the same
  RAM fleet-wide), rank r on replica r;
- `fleet`: three replicas with the whole cache each;
- `fleet-split-one`: as `fleet-split`, but every rank on replica 0 (the other two only own tiles:
  what they keep is decided by the plans replica 0 relays to them).

Per setup: bytes and tile loads from the store fleet-wide (`cogfeed_store_bytes_total`,
`cogfeed_tiles_loaded_total{source="store"}`, counted from after start-up), decodes, bytes moved
between replicas, wall time and CPU (daemons from /proc, the three loaders in threads of this
process). All on one 2-core machine, so the fleet's rate says nothing about a fleet's speed; its
reads do. Not part of CI.
"""

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import archive_bench as ab  # noqa: E402
import sample_bench as sb  # noqa: E402
import services as svc  # noqa: E402

import cogfeed  # noqa: E402

RANKS = 3


def start(work, n, capacity, dataset, near=None):
    """n daemons (a fleet when n > 1), each with a `capacity`-byte tile cache (and a `near`-byte
    near cache for tiles peers own; None: the daemon's default, an eighth of the cache)."""
    daemons = [svc.Daemon(Path(work) / f"d{time.monotonic_ns()}-{i}", {}, capacity_bytes=capacity)
               for i in range(n)]
    for d in daemons:
        d.port = svc.free_port()
    addrs = [f"127.0.0.1:{d.port}" for d in daemons]
    for d, addr in zip(daemons, addrs):
        cluster = svc.cluster_toml(addr, addrs, near) + "\n" if n > 1 else ""
        d.extra = cluster + dataset
    return [d.start() for d in daemons]


def totals(daemons):
    out = {}
    for d in daemons:
        total, detail = d.metrics()
        for k in ("cogfeed_store_bytes_total", "cogfeed_cache_misses_total", "cogfeed_store_requests_total"):
            out[k] = out.get(k, 0.0) + total.get(k, 0.0)
        for (name, labels), v in detail.items():
            if name == "cogfeed_tiles_loaded_total" and 'source="store"' in labels:
                out["store_loads"] = out.get("store_loads", 0.0) + v
            if name == "cogfeed_peer_bytes_total" and 'direction="out"' in labels:
                out["peer_bytes"] = out.get("peer_bytes", 0.0) + v
    return out


def epoch(daemons, samples, spread=True):
    """One local-order epoch as RANKS ranks at once, rank r on daemon r mod n (all on the first
    without `spread`)."""
    counts = [0] * RANKS
    errors = []

    def rank(r):
        try:
            loader = cogfeed.Loader(daemons[r % len(daemons) if spread else 0].address, "sample", sampler="random",
                                    patch_size=sb.PATCH, batch_size=sb.BATCH, seed=sb.SEED,
                                    samples_per_epoch=samples, layers=ab.LAYERS, order="local",
                                    rank=r, world_size=RANKS)
            counts[r] = sum(b.layers["s2"].shape[0] for b in loader)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--side", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--cache-fraction", type=float, default=3.0)
    ap.add_argument("--setups", default="one,fleet-split,fleet")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--near-fraction", type=float, help="replicas' near cache as a fraction of their tile cache "
                    "(default: the daemon's, 1/8)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    data = a.data or Path.home() / ".cache" / "cogfeed-bench" / f"archive-{a.side}"
    items = sb.write_archive(data, a.side)
    decoded = ab.decoded_bytes(items)
    cache = int(decoded / a.cache_fraction)
    dataset = sb.DATASET.format(items=items, s2=json.dumps(list(sb.S2_10M + sb.S2_20M)), s2_dates=sb.S2_DATES,
                                s1_dates=sb.S1_DATES)
    print(f"{decoded / 2**30:.2f} GiB decoded; one daemon's cache {cache >> 20} MiB; epoch {a.samples} samples "
          f"as {RANKS} ranks", flush=True)
    setups = {"one": (1, cache), "fleet-split": (3, cache // 3), "fleet": (3, cache),
              "fleet-split-one": (3, cache // 3)}
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for run in range(a.runs):
            for name in a.setups.split(","):
                n, capacity = setups[name]
                near = int(capacity * a.near_fraction) if a.near_fraction is not None else None
                daemons = start(work, n, capacity, dataset, near)
                try:
                    m0 = totals(daemons)
                    cpu0, own0, t0 = sum(d.cpu() for d in daemons), time.process_time(), time.perf_counter()
                    got = epoch(daemons, a.samples, spread=not name.endswith("-one"))
                    wall = time.perf_counter() - t0
                    cpu = sum(d.cpu() for d in daemons) - cpu0 + time.process_time() - own0
                    m1 = totals(daemons)
                finally:
                    for d in daemons:
                        d.stop()
                d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
                r = {"samples": got, "samples_s": got / wall, "cpu_ms": 1000 * cpu / got,
                     "store_mib": d["cogfeed_store_bytes_total"] / 2**20,
                     "store_reads": d["cogfeed_store_requests_total"], "store_loads": d.get("store_loads", 0.0),
                     "decodes": d["cogfeed_cache_misses_total"], "peer_mib": d.get("peer_bytes", 0.0) / 2**20}
                for k, v in r.items():
                    results.setdefault(name, {}).setdefault(k, []).append(v)
                print(f"run {run} {name:12} {n} x {capacity >> 20} MiB: {got} samples {r['samples_s']:6.1f}/s "
                      f"{r['cpu_ms']:6.2f} ms CPU/sample; store {r['store_mib']:8.1f} MiB in {r['store_reads']:.0f} "
                      f"reads, {r['store_loads']:.0f} tiles loaded from it; {r['decodes']:.0f} cache misses; "
                      f"{r['peer_mib']:.0f} MiB between replicas", flush=True)
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in results.items()}
    if "one" in med:
        for name in med:
            if name != "one":
                print(f"{name}: store bytes {med[name]['store_mib'] / med['one']['store_mib']:.2f}x one daemon's, "
                      f"tiles loaded from the store {med[name]['store_loads'] / max(med['one']['store_loads'], 1):.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"medians": med, "raw": results, "decoded_bytes": decoded, "cache": cache},
                                     indent=1))


if __name__ == "__main__":
    main()
