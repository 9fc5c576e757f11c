#!/usr/bin/env python3
"""Locality-ordered epochs against the sampler's own order, warm and cold (issue 28, item 1).

    python3 client/bench/locality_bench.py [--data DIR] [--scenes 2] [--pixels 4096] [--dates 4]
        [--samples 2048] [--random-samples 320] [--runs 3] [--json OUT]

The archive (written once into `--data`, default `~/.cache/cogfeed-bench/locality`), laid out as
Earth Search publishes Sentinel-2: `--scenes` side-by-side UTM tiles (EPSG:32632, 10 m) of `--pixels`
squared, `--dates` dates each, one COG per band (B02, B03, B04, B08) and date: 12-bit uint16 noise,
written by rasterio and made a COG by `gdal_translate -of COG -co BLOCKSIZE=1024 -co COMPRESS=DEFLATE
-co PREDICTOR=2` (1024² tiles), a STAC Item per scene and date. The daemon serves it as a map-space
dataset with one time layer `s2 [dates, 4, 32, 32]` (bilinear, native CRS): a sample touches
dates × 4 source tiles (more where its footprint straddles a tile edge).

Measured with the release daemon and the Python `Loader` in this process, random sampler, patch 32,
batch 16, for `order = "random"` and `order = "local"` (the default dial: `open_blocks` from the
tile cache, `visits = 1`):

- warm: a daemon with a 4 GiB tile cache, primed by one pass, then the same epoch again;
- cold: a fresh daemon whose tile cache is a quarter of the decoded archive (the working set does
  not fit), one epoch: `--samples` for local, the first `--random-samples` of it for random (each of
  its samples decodes whole tiles; the per-sample figures are what a whole epoch would cost).

Per regime and order: samples/s, CPU-s per sample (daemon + this process), source-tile decodes per
sample (`cogfeed_cache_misses_total`), and, for local, decodes per epoch against the distinct tiles
the epoch touches (target ≤ 1.2×). Medians of `--runs`. Not part of CI.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "client" / "python"))
import services as svc  # noqa: E402

import cogfeed  # noqa: E402

BANDS = ("B02", "B03", "B04", "B08")
EPSG, RES, X0, Y0 = 32632, 10.0, 600000.0, 5200000.0
TILE = 1024
PATCH, BATCH = 32, 16


def write_archive(data: Path, scenes: int, pixels: int, dates: int) -> Path:
    """The COGs and their STAC Items (kept when items.json is there)."""
    import pyproj
    import rasterio
    from rasterio.transform import from_origin

    items_path = data / "items.json"
    if items_path.exists():
        return items_path
    data.mkdir(parents=True, exist_ok=True)
    to_lonlat = pyproj.Transformer.from_crs(EPSG, 4326, always_xy=True)
    rng = np.random.default_rng(0)
    features = []
    for s in range(scenes):
        x0 = X0 + s * pixels * RES
        transform = from_origin(x0, Y0, RES, RES)
        xs = [x0, x0 + pixels * RES, x0, x0 + pixels * RES]
        ys = [Y0, Y0, Y0 - pixels * RES, Y0 - pixels * RES]
        lon, lat = to_lonlat.transform(xs, ys)
        bbox = [min(lon), min(lat), max(lon), max(lat)]
        ring = [[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]
        for d in range(dates):
            assets = {}
            for band in BANDS:
                name = f"s{s:02d}_d{d:02d}_{band}.tif"
                with tempfile.TemporaryDirectory(dir=data) as tmp:
                    plain = os.path.join(tmp, "plain.tif")
                    with rasterio.open(plain, "w", driver="GTiff", width=pixels, height=pixels, count=1,
                                       dtype="uint16", crs=f"EPSG:{EPSG}", transform=transform, nodata=0) as dst:
                        dst.write(rng.integers(1, 4096, size=(pixels, pixels), dtype=np.uint16), 1)
                    subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", f"BLOCKSIZE={TILE}", "-co",
                                    "COMPRESS=DEFLATE", "-co", "PREDICTOR=2", plain, str(data / name)], check=True)
                assets[band] = {
                    "href": name, "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                    "roles": ["data"], "proj:epsg": EPSG, "proj:shape": [pixels, pixels],
                    "proj:transform": [RES, 0.0, x0, 0.0, -RES, Y0],
                    "raster:bands": [{"data_type": "uint16", "nodata": 0, "spatial_resolution": RES}],
                }
            features.append({
                "type": "Feature", "stac_version": "1.0.0", "id": f"s{s:02d}_d{d:02d}", "collection": "bench",
                "bbox": bbox, "geometry": {"type": "Polygon", "coordinates": [ring]},
                "properties": {"datetime": f"2024-06-{d + 1:02d}T10:00:00Z", "proj:epsg": EPSG}, "assets": assets,
            })
    tmp = items_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"type": "FeatureCollection", "features": features}, indent=1))
    tmp.rename(items_path)
    return items_path


DATASET = """
[[datasets]]
name = "bench"
stac = "{items}"
crs = "EPSG:{epsg}"

[[datasets.layers]]
name = "s2"
assets = {assets}
resolution = {res}
resampling = "bilinear"
time_steps = {dates}
"""


def epoch(daemon, order, samples, max_batches=0, prefetch=0):
    """(seconds, CPU-s daemon + this process, decodes, samples) of one stream."""
    before = daemon.metrics()[0].get("cogfeed_cache_misses_total", 0.0)
    cpu0, own0, t0 = daemon.cpu(), time.process_time(), time.perf_counter()
    loader = cogfeed.Loader(daemon.address, "bench", sampler="random", patch_size=PATCH, batch_size=BATCH,
                            seed=11, samples_per_epoch=samples, max_batches=max_batches, order=order,
                            prefetch=prefetch)
    n = sum(b.layers["s2"].shape[0] for b in loader)
    wall = time.perf_counter() - t0
    cpu = daemon.cpu() - cpu0 + time.process_time() - own0
    decodes = daemon.metrics()[0].get("cogfeed_cache_misses_total", 0.0) - before
    return wall, cpu, decodes, n


def touched_tiles(daemon, samples):
    """Distinct source tiles the local epoch reads: per sample, the bands of every date up
    to the drawn Item's (`sSS_dDD`) under its footprint."""
    loader = cogfeed.Loader(daemon.address, "bench", sampler="random", patch_size=PATCH, batch_size=BATCH,
                            seed=11, samples_per_epoch=samples, order="local")
    tiles = set()
    for b in loader:
        for (_, col, row, w, h, *_), m in zip(b.windows.tolist(), b.meta):
            scene, date = (int(part[1:]) for part in m.drawn.split("_"))
            for ty in range(row // TILE, (row + h - 1) // TILE + 1):
                for tx in range(col // TILE, (col + w - 1) // TILE + 1):
                    tiles.update((scene, d, tx, ty) for d in range(date + 1))
    return len(tiles) * len(BANDS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "cogfeed-bench" / "locality")
    ap.add_argument("--scenes", type=int, default=2)
    ap.add_argument("--pixels", type=int, default=4096)
    ap.add_argument("--dates", type=int, default=4)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--random-samples", type=int, default=320)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--eviction", default="plan,lru", help="tile cache evictions to run cold (comma-separated)")
    ap.add_argument("--orders", default="random,local")
    ap.add_argument("--prefetch", type=int, default=0, help="cold streams' look-ahead (0: the daemon's adaptive one)")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm regime")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not shutil.which("gdal_translate"):
        sys.exit("gdal_translate is needed (apt install gdal-bin)")
    items = write_archive(a.data, a.scenes, a.pixels, a.dates)
    decoded = a.scenes * a.dates * len(BANDS) * a.pixels * a.pixels * 2
    cold_cache = decoded // 4
    extra = DATASET.format(items=items, epsg=EPSG, assets=json.dumps(list(BANDS)), res=RES, dates=a.dates)
    print(f"archive: {a.scenes} scenes x {a.dates} dates x {len(BANDS)} bands of {a.pixels}² "
          f"({decoded / 2**30:.2f} GiB decoded); cold cache {cold_cache >> 20} MiB; epoch {a.samples} samples")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        def fresh(capacity, eviction="plan"):
            return svc.Daemon(Path(work) / f"d{time.monotonic_ns()}", {}, capacity_bytes=capacity,
                              extra_toml=extra, cache_toml=f'eviction = "{eviction}"').start()

        def record(key, run, label, measured):
            wall, cpu, dec, got = measured
            r = results.setdefault(key, {"samples_s": [], "cpu_ms": [], "decodes": []})
            r["samples_s"].append(got / wall)
            r["cpu_ms"].append(1000 * cpu / got)
            r["decodes"].append(dec / got)
            print(f"run {run} {label}: {got} samples, {got / wall:7.1f} samples/s, "
                  f"{1000 * cpu / got:6.2f} ms CPU/sample, {dec / got:6.2f} decodes/sample", flush=True)

        for run in range(a.runs):
            for order in a.orders.split(","):
                n = a.samples if order == "local" else a.random_samples
                for eviction in a.eviction.split(","):
                    d = fresh(cold_cache, eviction)
                    try:
                        cold = epoch(d, order, a.samples, max_batches=n // BATCH, prefetch=a.prefetch)
                    finally:
                        d.stop()
                    record(f"{order}/cold/{eviction}", run, f"{order:6} cold {eviction:4}", cold)
                    if order == "local" and eviction == "plan":
                        results.setdefault("local/cold_decodes_epoch", []).append(cold[2])
                    elif order == "local" and "local/cold_decodes_epoch" not in results:
                        results.setdefault(f"local/cold_decodes_epoch/{eviction}", []).append(cold[2])
                if a.no_warm:
                    continue
                d = fresh(4 << 30)
                try:
                    epoch(d, order, a.samples, max_batches=n // BATCH)
                    warm = epoch(d, order, a.samples, max_batches=n // BATCH)
                    if order == "local" and "local/touched_tiles" not in results:
                        results["local/touched_tiles"] = touched_tiles(d, a.samples)
                finally:
                    d.stop()
                record(f"{order}/warm", run, f"{order:6} warm     ", warm)
    print("\nmedians:")
    med = {}
    for key, r in results.items():
        if not isinstance(r, dict):
            continue
        med[key] = {k: statistics.median(v) for k, v in r.items()}
        print(f"  {key:12} {med[key]['samples_s']:7.1f} samples/s  {med[key]['cpu_ms']:6.2f} ms CPU/sample  "
              f"{med[key]['decodes']:6.2f} decodes/sample")
    evictions = a.eviction.split(",")
    for order in a.orders.split(","):
        for ev in evictions:
            c, w = med.get(f"{order}/cold/{ev}"), med.get(f"{order}/warm")
            if c and w:
                print(f"  {order} ({ev}): cold/warm CPU per sample {c['cpu_ms'] / w['cpu_ms']:.2f}x")
        if "plan" in evictions and "lru" in evictions:
            p, l = med[f"{order}/cold/plan"], med[f"{order}/cold/lru"]
            print(f"  {order}: cold decodes per sample, lru/plan {l['decodes'] / max(p['decodes'], 1e-9):.2f}x, "
                  f"CPU lru/plan {l['cpu_ms'] / p['cpu_ms']:.2f}x")
    if "random" in a.orders and "local" in a.orders:
        ev = evictions[0]
        print(f"  cold decodes per sample ({ev}), random/local: "
              f"{med[f'random/cold/{ev}']['decodes'] / max(med[f'local/cold/{ev}']['decodes'], 1e-9):.1f}x")
    if "local/touched_tiles" in results:
        for key in [k for k in results if k.startswith("local/cold_decodes_epoch")]:
            dec = statistics.median(results[key])
            print(f"  local cold epoch ({key.split('/')[-1] if key.count('/') > 1 else 'plan'}): {dec:.0f} decodes for "
                  f"{results['local/touched_tiles']} distinct tiles touched "
                  f"({dec / results['local/touched_tiles']:.2f}x)")
    if a.json:
        a.json.write_text(json.dumps({"medians": med, "raw": results}, indent=1))


if __name__ == "__main__":
    main()
