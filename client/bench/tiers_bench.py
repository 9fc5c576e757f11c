#!/usr/bin/env python3
"""The tiers below the decoded cache, cold, over HTTP (issue 28, items 3 and 4).

    python3 client/bench/tiers_bench.py [--data DIR] [--samples 320] [--delays 0,80] [--runs 3] [--json OUT]

The archive is the locality benchmark's (`locality_bench.py`: 2 side-by-side UTM tiles of 4096², 4 dates,
one COG per band B02/B03/B04/B08 and date, 1024² DEFLATE + predictor 2 tiles written by GDAL), served by
nginx over HTTP, straight or behind `delay_proxy.py` with `--delays` ms one way. The daemon (release build)
serves it as a map-space dataset `s2 [4 dates, 4 bands, 32, 32]`, random sampler, batch 16, its decoded
tile cache a quarter of the decoded archive (the working set does not fit), `--samples` samples per
stream. Regimes, each a fresh daemon:

- `lru`: the decoded cache alone (`compressed_bytes = 0`, no disk tier): what cogfeed did before;
- `compressed`: plus the compressed RAM tier, sized to hold the compressed archive;
- `disk`: the disk tier (fresh directory), no compressed tier; `restart`: a new daemon on the same
  directory (a restart), the same stream;

for `order = "random"` and `order = "local"` (the default dial). Per regime: samples/s, CPU-s per sample
(daemon + this process), decodes per sample (`cogfeed_cache_misses_total`), store GETs and bytes per sample
(nginx's access log), and for `restart` its tile GETs (`cogfeed_tiles_loaded_total{source="store"}`)
against the first run's (target <= 1 %). Medians of
`--runs`. Not part of CI.
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import locality_bench as lb  # noqa: E402
import services as svc  # noqa: E402

import cogfeed  # noqa: E402


def stream(daemon, nginx, order, samples):
    """Figures of one stream of `samples` random footprints."""
    m0, d0 = daemon.metrics()
    off = nginx.log_offset()
    cpu0, own0, t0 = daemon.cpu(), time.process_time(), time.perf_counter()
    loader = cogfeed.Loader(daemon.address, "bench", sampler="random", patch_size=lb.PATCH,
                            batch_size=lb.BATCH, seed=11, samples_per_epoch=2048,
                            max_batches=samples // lb.BATCH, order=order)
    n = sum(b.layers["s2"].shape[0] for b in loader)
    wall = time.perf_counter() - t0
    cpu = daemon.cpu() - cpu0 + time.process_time() - own0
    m1, d1 = daemon.metrics()
    store = ("cogfeed_tiles_loaded_total", '{source="store"}')
    gets, sent, errors = nginx.since(off)
    if errors:
        raise RuntimeError(f"{errors} store requests failed")
    decodes = m1.get("cogfeed_cache_misses_total", 0.0) - m0.get("cogfeed_cache_misses_total", 0.0)
    return {"samples_s": n / wall, "cpu_ms": 1000 * cpu / n, "decodes": decodes / n,
            "gets": gets / n, "mib": sent / n / 2**20, "gets_total": gets,
            "tile_gets": d1.get(store, 0.0) - d0.get(store, 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "cogfeed-bench" / "locality")
    ap.add_argument("--samples", type=int, default=320)
    ap.add_argument("--delays", default="0,80")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    scenes, pixels, dates = 2, 4096, 4
    items = lb.write_archive(a.data, scenes, pixels, dates)
    decoded = scenes * dates * len(lb.BANDS) * pixels * pixels * 2
    compressed = sum(p.stat().st_size for p in a.data.glob("*.tif"))
    cold_cache = decoded // 4
    print(f"archive: {decoded / 2**30:.2f} GiB decoded, {compressed / 2**30:.2f} GiB compressed; "
          f"decoded cache {cold_cache >> 20} MiB; {a.samples} samples per stream")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        nginx = svc.Nginx(a.data, work).start()
        try:
            for delay in (int(d) for d in a.delays.split(",")):
                proxy = svc.Proxy(nginx.port, delay).start() if delay else None
                port = proxy.port if proxy else nginx.port
                dataset = lb.DATASET.format(items=f"http://127.0.0.1:{port}/{items.name}", epsg=lb.EPSG,
                                            assets=json.dumps(list(lb.BANDS)), res=lb.RES, dates=dates)
                try:
                    for run in range(a.runs):
                        for order in ("random", "local"):
                            disk = Path(work) / f"disk-{delay}-{run}-{order}"
                            tiers = {
                                "lru": "compressed_bytes = 0",
                                "compressed": f"compressed_bytes = {int(compressed * 1.1)}",
                                "disk": f'compressed_bytes = 0\ndisk_dir = "{disk}"\ndisk_bytes = {4 * compressed}',
                            }
                            for regime, cache in tiers.items():
                                runs = ("disk", "restart") if regime == "disk" else (regime,)
                                for name in runs:
                                    d = svc.Daemon(Path(work) / f"d{time.monotonic_ns()}", {},
                                                   capacity_bytes=cold_cache, extra_toml=cache + "\n" + dataset)
                                    d.start()
                                    try:
                                        r = stream(d, nginx, order, a.samples)
                                        if name == "disk":
                                            # Let the background writes land before the restart.
                                            time.sleep(2.0)
                                    finally:
                                        d.stop()
                                    if name == "restart":
                                        shutil.rmtree(disk, ignore_errors=True)
                                    key = f"{delay}ms/{order}/{name}"
                                    for k, v in r.items():
                                        results.setdefault(key, {}).setdefault(k, []).append(v)
                                    print(f"run {run} {key:22} {r['samples_s']:7.1f} samples/s "
                                          f"{r['cpu_ms']:7.2f} ms CPU/sample {r['decodes']:6.2f} decodes/sample "
                                          f"{r['gets']:6.2f} GETs/sample {r['mib']:6.2f} MiB/sample", flush=True)
                finally:
                    if proxy:
                        proxy.stop()
        finally:
            nginx.stop()
    print("\nmedians:")
    med = {key: {k: statistics.median(v) for k, v in r.items()} for key, r in results.items()}
    for key, m in med.items():
        print(f"  {key:22} {m['samples_s']:7.1f} samples/s {m['cpu_ms']:7.2f} ms CPU/sample "
              f"{m['decodes']:6.2f} decodes/sample {m['gets']:6.2f} GETs/sample {m['mib']:6.2f} MiB/sample")
    for key in sorted({k.rsplit("/", 1)[0] for k in med}):
        lru, comp = med.get(f"{key}/lru"), med.get(f"{key}/compressed")
        first, again = med.get(f"{key}/disk"), med.get(f"{key}/restart")
        if lru and comp:
            print(f"  {key}: compressed tier: {lru['gets'] / max(comp['gets'], 1e-9):.1f}x fewer GETs, "
                  f"{comp['samples_s'] / lru['samples_s']:.2f}x samples/s")
        if first and again:
            print(f"  {key}: restart with a warm disk tier: {again['tile_gets']:.0f} tile GETs "
                  f"({100 * again['tile_gets'] / max(first['tile_gets'], 1):.2f} % of the first run's "
                  f"{first['tile_gets']:.0f}; all GETs incl. headers and STAC: {again['gets_total']:.0f} vs "
                  f"{first['gets_total']:.0f}), {again['samples_s'] / first['samples_s']:.2f}x samples/s")
    if a.json:
        a.json.write_text(json.dumps({"medians": med, "raw": results}, indent=1))


if __name__ == "__main__":
    main()
