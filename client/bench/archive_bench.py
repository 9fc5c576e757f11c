#!/usr/bin/env python3
"""The published multimodal sample at archive scale: cold against warm, by order and eviction (issue 28).

    python3 client/bench/archive_bench.py [--data DIR] [--side 2048] [--samples 8192]
        [--random-samples 256] [--cache-fraction 3] [--runs 3] [--delays 0,80] [--perf DIR] [--json OUT]

The archive is `sample_bench.py`'s (the same writer: Earth Search's layout, one COG per band and
date, 1024² DEFLATE + predictor 2 tiles written by GDAL; two overlapping Sentinel-2 tiles, 16 dates
x 10 bands, Sentinel-1 VV/VH for 4 ascending and 4 descending dates, a uint8 land cover at about 1 m
in EPSG:4326) with tiles of `--side` pixels at 10 m (default 2048: 4 blocks of 1024² per band and
date), written once into `--data` (default `~/.cache/cogfeed-bench/archive-SIDE`). The daemon serves
the published sample (`s2 [16,10,32,32]`, `s1_asc`/`s1_desc [4,2,32,32]`, `label [1,320,320]` mode at
1 m) with the random sampler, patch 32, batch 16, an epoch of `--samples` (about one cover of the
archive's area at the default side).

Each run, each regime a fresh release daemon:

- warm: a tile cache that holds the whole decoded archive; one local epoch decodes what the epoch
  touches (its decodes are the epoch's distinct source tiles, nothing is evicted), then the same
  epoch again in local and in random order, measured;
- cold: a tile cache of the decoded archive / `--cache-fraction`, one epoch in local order (the
  default dial: `open_blocks` from the cache) and the first `--random-samples` of the random
  order (each of its samples decodes whole tiles), with `eviction = "plan"` and `"lru"`.

With `--delays`, each run also serves the cold regimes (eviction by the plan) over HTTP: nginx
serves the archive, straight (0) or behind `delay_proxy.py` with that many ms one way, and the
STAC Items are read from it too; the store GETs and bytes are nginx's access log.

Per regime: samples/s, CPU-s per sample (daemon from /proc + this process, the Python `Loader`),
source-tile decodes per sample (`cogfeed_cache_misses_total`) and store reads per sample
(`cogfeed_store_requests_total`, files in the page cache); for cold local, decodes per epoch
against the distinct tiles the epoch touches (target <= 1.2x), and cold CPU per sample against
warm (target <= 1.5x). Medians of `--runs`. Needs GDAL's command-line tools, rasterio and pyproj.
Not part of CI.
"""

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sample_bench as sb  # noqa: E402
import services as svc  # noqa: E402

import cogfeed  # noqa: E402

DTYPE_BYTES = {"uint8": 1, "uint16": 2, "int16": 2, "float32": 4, "float64": 8}
LAYERS = sb.LAYERS["whole"]


def decoded_bytes(items: Path) -> int:
    """The decoded size of every asset of the archive (full resolution, no overviews)."""
    total = 0
    for f in json.loads(items.read_text())["features"]:
        for a in f["assets"].values():
            rows, cols = a["proj:shape"]
            total += rows * cols * DTYPE_BYTES[a["raster:bands"][0]["data_type"]]
    return total


def stream(daemon, order, samples, max_batches=0, prefetch=0, visits=1):
    """Figures of one stream of the whole published sample."""
    m0, d0 = daemon.metrics()
    cpu0, own0, t0 = daemon.cpu(), time.process_time(), time.perf_counter()
    loader = cogfeed.Loader(daemon.address, "sample", sampler="random", patch_size=sb.PATCH,
                            batch_size=sb.BATCH, seed=sb.SEED, samples_per_epoch=samples,
                            max_batches=max_batches, layers=LAYERS, order=order, prefetch=prefetch,
                            visits=visits if order == "local" else 0)
    n = sum(b.layers["s2"].shape[0] for b in loader)
    wall = time.perf_counter() - t0
    daemon_cpu, client_cpu = daemon.cpu() - cpu0, time.process_time() - own0
    m1, d1 = daemon.metrics()

    def delta(name):
        return m1.get(name, 0.0) - m0.get(name, 0.0)

    def labelled(name, label):
        key = (name, label)
        return d1.get(key, 0.0) - d0.get(key, 0.0)

    def loaded(source):
        return labelled("cogfeed_tiles_loaded_total", f'{{source="{source}"}}') / n

    # Decodes in whole-tile equivalents: whole blocks, plus row-limited decodes of a block's
    # top rows weighted by their bytes against a whole block's (a daemon without them
    # reports only cache misses, all whole decodes).
    whole = labelled("cogfeed_tiles_decoded_total", '{extent="whole"}')
    top = labelled("cogfeed_tiles_decoded_total", '{extent="top_rows"}')
    whole_bytes = labelled("cogfeed_tiles_decoded_bytes_total", '{extent="whole"}')
    top_bytes = labelled("cogfeed_tiles_decoded_bytes_total", '{extent="top_rows"}')
    misses = delta("cogfeed_cache_misses_total")
    if whole + top == 0:
        whole = misses
    equivalents = whole + (top_bytes / (whole_bytes / whole) if whole and whole_bytes else 0.0)

    return {"samples": n, "samples_s": n / wall, "cpu_ms": 1000 * (daemon_cpu + client_cpu) / n,
            "daemon_ms": 1000 * daemon_cpu / n, "client_ms": 1000 * client_cpu / n,
            "decodes": misses / n, "decodes_total": misses, "whole_decodes": whole, "top_rows_decodes": top,
            "decoded_equivalents": equivalents,
            "reads": delta("cogfeed_store_requests_total") / n,
            "mib_read": delta("cogfeed_store_bytes_total") / n / 2**20,
            "planned_evictions": delta("cogfeed_cache_evictions_planned_total"),
            "prefetched": delta("cogfeed_prefetched_tiles_total") / n,
            "from_prefetched": loaded("prefetched"), "from_compressed": loaded("compressed"),
            "from_store": loaded("store")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--side", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--random-samples", type=int, default=256)
    ap.add_argument("--cache-fraction", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--eviction", default="plan,lru")
    ap.add_argument("--orders", default="local,random")
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--delays", default="", help="also cold over HTTP (nginx, delay_proxy.py) at these one-way ms, e.g. 0,80")
    ap.add_argument("--prefetch", type=int, default=0, help="cold streams' look-ahead (0: the daemon's adaptive one)")
    ap.add_argument("--visits", type=int, default=1, help="`visits` of the local order (times each group is opened)")
    ap.add_argument("--compressed-mib", type=int, default=None,
                    help="`[cache] compressed_bytes` of the cold daemons in MiB (default: the daemon's, an eighth of the tile cache)")
    ap.add_argument("--plan-prefetch-mib", type=int, default=None,
                    help="`[cache] plan_prefetch_bytes` of the cold daemons in MiB (default: the daemon's)")
    ap.add_argument("--simulated", action="store_true",
                    help="with --delays: nginx straight, the round trip (2 x the one-way delay) slept inside the daemon "
                         "(`[store] simulated_latency_ms`) instead of delay_proxy.py, whose CPU shares the machine")
    ap.add_argument("--only-http", action="store_true", help="with --delays: only the HTTP regimes (no cold runs on files)")
    ap.add_argument("--perf", type=Path, help="record a `perf` profile of the daemon in each cold stream of the first run")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    data = a.data or Path.home() / ".cache" / "cogfeed-bench" / f"archive-{a.side}"
    t = time.perf_counter()
    items = sb.write_archive(data, a.side)
    decoded = decoded_bytes(items)
    cold_cache = int(decoded / a.cache_fraction)
    print(f"archive ready in {time.perf_counter() - t:.0f} s: {decoded / 2**30:.2f} GiB decoded; cold tile cache "
          f"{cold_cache >> 20} MiB; epoch {a.samples} samples", flush=True)
    extra = sb.DATASET.format(items=items, s2=json.dumps(list(sb.S2_10M + sb.S2_20M)), s2_dates=sb.S2_DATES,
                              s1_dates=sb.S1_DATES)
    results = {}

    def record(key, run, r):
        for k, v in r.items():
            results.setdefault(key, {}).setdefault(k, []).append(v)
        print(f"run {run} {key:18} {r['samples']:5} samples {r['samples_s']:7.1f} samples/s "
              f"{r['cpu_ms']:7.2f} ms CPU/sample (daemon {r['daemon_ms']:.2f}, client {r['client_ms']:.2f}) "
              f"{r['decodes']:6.2f} decodes/sample {r['reads']:6.2f} reads/sample "
              f"({r['decodes_total']:.0f} decodes: {r['whole_decodes']:.0f} whole, {r['top_rows_decodes']:.0f} of top "
              f"rows, {r['decoded_equivalents']:.0f} whole-tile equivalents; "
              f"{r['planned_evictions']:.0f} planned evictions; per sample "
              f"{r['prefetched']:.2f} prefetched; loaded from prefetched {r['from_prefetched']:.2f}, "
              f"compressed {r['from_compressed']:.2f}, "
              f"from the store {r['from_store']:.2f})", flush=True)

    with tempfile.TemporaryDirectory() as work, contextlib.ExitStack() as stack:
        nginx = None
        if a.delays:
            nginx = svc.Nginx(data, work).start()
            stack.callback(nginx.stop)

        compressed = "" if a.compressed_mib is None else f"compressed_bytes = {a.compressed_mib << 20}"
        if a.plan_prefetch_mib is not None:
            compressed += f"\nplan_prefetch_bytes = {a.plan_prefetch_mib << 20}"

        def fresh(capacity, eviction="plan"):
            return svc.Daemon(Path(work) / f"d{time.monotonic_ns()}", {}, capacity_bytes=capacity,
                              extra_toml=extra, cache_toml=f'eviction = "{eviction}"\n{compressed}').start()

        for run in range(a.runs):
            for order in a.orders.split(",") if not a.only_http else ():
                n = a.samples if order == "local" else a.random_samples
                for eviction in a.eviction.split(","):
                    d = fresh(cold_cache, eviction)
                    perf = None
                    if a.perf and run == 0:
                        a.perf.mkdir(parents=True, exist_ok=True)
                        perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(d.proc.pid), "-o",
                                                 str(a.perf / f"{order}-{eviction}.data")],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(1)
                    try:
                        record(f"{order}/cold/{eviction}", run,
                               stream(d, order, a.samples, n // sb.BATCH, a.prefetch, a.visits))
                    finally:
                        if perf:
                            perf.send_signal(signal.SIGINT)
                            perf.wait()
                        d.stop()
            for delay in (int(x) for x in a.delays.split(",") if x):
                proxy = svc.Proxy(nginx.port, delay).start() if delay and not a.simulated else None
                port = proxy.port if proxy else nginx.port
                over_http = sb.DATASET.format(items=f"http://127.0.0.1:{port}/{items.name}",
                                              s2=json.dumps(list(sb.S2_10M + sb.S2_20M)), s2_dates=sb.S2_DATES,
                                              s1_dates=sb.S1_DATES)
                if a.simulated:
                    over_http = f"[store]\nsimulated_latency_ms = {2 * delay}\n\n" + over_http
                try:
                    for order in a.orders.split(","):
                        n = a.samples if order == "local" else a.random_samples
                        d = svc.Daemon(Path(work) / f"d{time.monotonic_ns()}", {}, capacity_bytes=cold_cache,
                                       extra_toml=over_http, cache_toml=compressed).start()
                        off = nginx.log_offset()
                        try:
                            r = stream(d, order, a.samples, n // sb.BATCH, a.prefetch)
                        finally:
                            d.stop()
                        gets, sent, errors = nginx.since(off)
                        if errors:
                            raise RuntimeError(f"{errors} store requests failed")
                        r.update(gets=gets / r["samples"], mib_sent=sent / r["samples"] / 2**20)
                        record(f"http{delay}{'sim' if a.simulated else ''}/{order}/cold", run, r)
                        print(f"    {r['gets']:.2f} GETs/sample, {r['mib_sent']:.2f} MiB sent/sample", flush=True)
                finally:
                    if proxy:
                        proxy.stop()
            if a.no_warm or a.only_http:
                continue
            d = fresh(int(decoded * 1.25))
            try:
                first = stream(d, "local", a.samples)
                # Distinct tiles: the whole blocks the pass decoded (a row-limited decode of a
                # tile whose whole block the epoch also reads is not another tile).
                results.setdefault("distinct", []).append(first["whole_decodes"])
                print(f"run {run} first local pass: {first['whole_decodes']:.0f} distinct tiles "
                      f"({first['top_rows_decodes']:.0f} top-rows decodes besides), "
                      f"{first['samples_s']:.1f} samples/s", flush=True)
                for order in a.orders.split(","):
                    record(f"{order}/warm", run, stream(d, order, a.samples))
            finally:
                d.stop()

    print("\nmedians:")
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in results.items() if isinstance(r, dict)}
    for k, m in med.items():
        print(f"  {k:18} {m['samples_s']:7.1f} samples/s {m['cpu_ms']:7.2f} ms CPU/sample "
              f"{m['decodes']:6.2f} decodes/sample {m['reads']:6.2f} reads/sample {m['mib_read']:6.2f} MiB/sample"
              + (f" {m['gets']:6.2f} GETs/sample {m['mib_sent']:6.2f} MiB sent/sample" if "gets" in m else ""))
    distinct = statistics.median(results["distinct"]) if "distinct" in results else None
    for order in a.orders.split(","):
        warm = med.get(f"{order}/warm")
        for ev in a.eviction.split(","):
            cold = med.get(f"{order}/cold/{ev}")
            if cold and warm:
                print(f"  {order} ({ev}): cold/warm CPU per sample {cold['cpu_ms'] / warm['cpu_ms']:.2f}x")
            if cold and order == "local" and distinct:
                print(f"  local ({ev}): {cold['decodes_total']:.0f} decodes per epoch ({cold['whole_decodes']:.0f} "
                      f"whole, {cold['top_rows_decodes']:.0f} of top rows: {cold['decoded_equivalents']:.0f} whole-tile "
                      f"equivalents) for {distinct:.0f} distinct tiles "
                      f"({cold['decoded_equivalents'] / distinct:.2f}x)")
        p, l = med.get(f"{order}/cold/plan"), med.get(f"{order}/cold/lru")
        if p and l:
            print(f"  {order}: decodes per sample lru/plan {l['decodes'] / max(p['decodes'], 1e-9):.2f}x, "
                  f"CPU lru/plan {l['cpu_ms'] / p['cpu_ms']:.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"medians": med, "raw": results, "decoded_bytes": decoded,
                                      "cold_cache_bytes": cold_cache}, indent=1))


if __name__ == "__main__":
    main()
