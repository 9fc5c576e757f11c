#!/usr/bin/env python3
"""The published multimodal sample, warm: CPU per sample by layer and whole (issue 27).

    python3 client/bench/sample_bench.py [--data DIR] [--samples 640] [--runs 3] [--perf DIR] [--json OUT]

The archive (written once into `--data`, default `~/.cache/cogfeed-bench/sample`) is laid out as
Earth Search and Planetary Computer publish it, every file written by rasterio and made a COG by
`gdal_translate -of COG -co BLOCKSIZE=1024 -co COMPRESS=DEFLATE -co PREDICTOR=2`:

- two Sentinel-2 tiles in EPSG:32632, 1024 px at 10 m, overlapping by 100 px (1 km, as MGRS tiles
  of one zone do), 16 dates each, one COG per band and date: B02 B03 B04 B08 at 10 m (1024²),
  B05 B06 B07 B8A B11 B12 at 20 m (512²), 12-bit uint16 noise, nodata 0;
- Sentinel-1 RTC on the same tiles, 4 ascending and 4 descending dates, VV and VH float32 at 10 m;
- a land-cover raster at about 1 m in EPSG:4326 over both tiles (uint8 classes in 20 m blocks,
  nodata 255).

The daemon serves it as a map-space dataset in each tile's own CRS:

    s2      [16, 10, 32, 32]   bilinear (the 20 m bands upsampled)
    s1_asc  [4, 2, 32, 32]     bilinear
    s1_desc [4, 2, 32, 32]     bilinear
    label   [1, 320, 320]      mode at 1 m (x10 finer, reprojected from EPSG:4326)

Warm: a daemon with a 2 GiB tile cache reads one epoch of `--samples` (random sampler, patch 32,
batch 16, fixed seed) to decode every tile it needs, then reads the same epoch again, measured:
samples/s and CPU-s per sample (daemon + this process, the Python `Loader`), for each layer alone
and for the whole sample; medians of `--runs`. `--perf DIR` records a `perf` profile of the
daemon during each pass of the first run (`perf report -i DIR/whole.data`, `s2.data`, ...). Needs
GDAL's command-line tools, rasterio and pyproj. Not part of CI.
"""

import argparse
import json
import os
import shutil
import signal
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

EPSG, X0, Y0 = 32632, 600000.0, 5200000.0
SIDE, OVERLAP, TILE = 1024, 100, 1024
S2_10M = ("B02", "B03", "B04", "B08")
S2_20M = ("B05", "B06", "B07", "B8A", "B11", "B12")
S2_DATES, S1_DATES = 16, 4
PATCH, BATCH, SEED = 32, 16, 5
COG = ["-of", "COG", "-co", f"BLOCKSIZE={TILE}", "-co", "COMPRESS=DEFLATE", "-co", "PREDICTOR=2"]

DATASET = """
[[datasets]]
name = "sample"
stac = "{items}"
crs = "native"

[[datasets.layers]]
name = "s2"
assets = {s2}
resolution = 10
resampling = "bilinear"
time_steps = {s2_dates}
filter = {{ collections = ["s2"] }}

[[datasets.layers]]
name = "s1_asc"
assets = ["vv", "vh"]
resolution = 10
resampling = "bilinear"
time_steps = {s1_dates}
filter = {{ collections = ["s1"], "sat:orbit_state" = "ascending" }}

[[datasets.layers]]
name = "s1_desc"
assets = ["vv", "vh"]
resolution = 10
resampling = "bilinear"
time_steps = {s1_dates}
filter = {{ collections = ["s1"], "sat:orbit_state" = "descending" }}

[[datasets.layers]]
name = "label"
assets = ["classes"]
resolution = 1
resampling = "mode"
nodata = 255
"""

LAYERS = {"s2": ["s2"], "s1": ["s1_asc", "s1_desc"], "label": ["label"],
          "whole": ["s2", "s1_asc", "s1_desc", "label"]}


def cog(data, name, array, crs, transform, nodata):
    """Writes `array` ([bands,] rows, cols) as the COG `data/name`."""
    import rasterio

    array = array if array.ndim == 3 else array[None]
    with tempfile.TemporaryDirectory(dir=data) as tmp:
        plain = os.path.join(tmp, "plain.tif")
        with rasterio.open(plain, "w", driver="GTiff", width=array.shape[2], height=array.shape[1],
                           count=array.shape[0], dtype=array.dtype, crs=crs, transform=transform,
                           nodata=nodata, tiled=True, blockxsize=512, blockysize=512) as dst:
            dst.write(array)
        subprocess.run(["gdal_translate", "-q", *COG, plain, str(data / name)], check=True)


def asset(name, shape, transform, dtype, nodata, res, epsg=EPSG):
    return {"href": name, "type": "image/tiff; application=geotiff; profile=cloud-optimized", "roles": ["data"],
            "proj:epsg": epsg, "proj:shape": list(shape), "proj:transform": list(transform)[:6],
            "raster:bands": [{"data_type": dtype, "nodata": nodata, "spatial_resolution": res}]}


def write_archive(data: Path, side: int = SIDE) -> Path:
    """The COGs and their STAC Items (kept when items.json is there): two Sentinel-2 tiles of
    `side` pixels at 10 m (and the rest of the archive over them)."""
    import pyproj
    from rasterio.transform import from_origin

    items_path = data / "items.json"
    if items_path.exists():
        return items_path
    data.mkdir(parents=True, exist_ok=True)
    to_lonlat = pyproj.Transformer.from_crs(EPSG, 4326, always_xy=True)
    rng = np.random.default_rng(0)
    features = []

    def feature(fid, collection, x0, day, props, assets):
        xs = [x0, x0 + side * 10, x0, x0 + side * 10]
        ys = [Y0, Y0, Y0 - side * 10, Y0 - side * 10]
        lon, lat = to_lonlat.transform(xs, ys)
        bbox = [min(lon), min(lat), max(lon), max(lat)]
        ring = [[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]
        features.append({"type": "Feature", "stac_version": "1.0.0", "id": fid, "collection": collection,
                         "bbox": bbox, "geometry": {"type": "Polygon", "coordinates": [ring]},
                         "properties": {"datetime": f"{day}T10:00:00Z", "proj:epsg": EPSG, **props},
                         "assets": assets})

    for tile in range(2):
        x0 = X0 + tile * (side - OVERLAP) * 10
        for d in range(S2_DATES):
            assets = {}
            for band in S2_10M + S2_20M:
                res = 10 if band in S2_10M else 20
                n = side * 10 // res
                name = f"s2_t{tile}_d{d:02d}_{band}.tif"
                transform = from_origin(x0, Y0, res, res)
                cog(data, name, rng.integers(1, 4096, size=(n, n), dtype=np.uint16), f"EPSG:{EPSG}", transform, 0)
                assets[band] = asset(name, (n, n), transform, "uint16", 0, res)
            day = f"2024-{4 + d // 8:02d}-{1 + (d % 8) * 3:02d}"
            feature(f"s2_t{tile}_d{d:02d}", "s2", x0, day, {}, assets)
        for orbit in ("ascending", "descending"):
            for d in range(S1_DATES):
                assets = {}
                transform = from_origin(x0, Y0, 10, 10)
                for pol in ("vv", "vh"):
                    name = f"s1_t{tile}_{orbit[:3]}_d{d}_{pol}.tif"
                    values = rng.gamma(2.0, 0.05, size=(side, side)).astype(np.float32)
                    cog(data, name, values, f"EPSG:{EPSG}", transform, None)
                    assets[pol] = asset(name, (side, side), transform, "float32", None, 10)
                day = f"2024-{4 + d:02d}-{2 + (orbit == 'descending') * 10:02d}"
                feature(f"s1_t{tile}_{orbit[:3]}_d{d}", "s1", x0, day, {"sat:orbit_state": orbit}, assets)
    # Land cover at about 1 m in EPSG:4326 over both tiles: classes in blocks of ~20 m.
    xs = [X0, X0 + (2 * side - OVERLAP) * 10]
    ys = [Y0 - side * 10, Y0]
    lon, lat = to_lonlat.transform([xs[0], xs[1], xs[0], xs[1]], [ys[0], ys[0], ys[1], ys[1]])
    west, east, south, north = min(lon) - 0.002, max(lon) + 0.002, min(lat) - 0.002, max(lat) + 0.002
    dx, dy = 1.3e-5, 9e-6
    cols, rows = int((east - west) / dx), int((north - south) / dy)
    coarse = rng.integers(1, 9, size=(rows // 20 + 1, cols // 20 + 1), dtype=np.uint8)
    classes = np.repeat(np.repeat(coarse, 20, axis=0), 20, axis=1)[:rows, :cols]
    transform = from_origin(west, north, dx, dy)
    cog(data, "landcover.tif", classes, "EPSG:4326", transform, 255)
    ring = [[west, south], [east, south], [east, north], [west, north], [west, south]]
    features.append({"type": "Feature", "stac_version": "1.0.0", "id": "landcover", "collection": "landcover",
                     "bbox": [west, south, east, north], "geometry": {"type": "Polygon", "coordinates": [ring]},
                     "properties": {"datetime": "2024-01-01T00:00:00Z", "proj:epsg": 4326},
                     "assets": {"classes": asset("landcover.tif", (rows, cols), transform, "uint8", 255, 1,
                                                 epsg=4326)}})
    tmp = items_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"type": "FeatureCollection", "features": features}, indent=1))
    tmp.rename(items_path)
    return items_path


def epoch(daemon, layers, samples):
    """(seconds, CPU-s of the daemon, CPU-s of this process, samples, the daemon's minor page
    faults) of one stream of `layers`."""
    cpu0, own0, t0, faults0 = daemon.cpu(), time.process_time(), time.perf_counter(), daemon.faults()
    loader = cogfeed.Loader(daemon.address, "sample", sampler="random", patch_size=PATCH, batch_size=BATCH,
                            seed=SEED, samples_per_epoch=samples, layers=layers)
    n = sum(b.layers[layers[0]].shape[0] for b in loader)
    wall = time.perf_counter() - t0
    return wall, daemon.cpu() - cpu0, time.process_time() - own0, n, daemon.faults() - faults0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "cogfeed-bench" / "sample")
    ap.add_argument("--samples", type=int, default=640)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--perf", type=Path)
    ap.add_argument("--call-graph", default="fp", help="perf's call-graph mode: fp, or dwarf for callers")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not shutil.which("gdal_translate"):
        sys.exit("gdal_translate is needed (apt install gdal-bin)")
    t = time.perf_counter()
    items = write_archive(a.data)
    print(f"archive ready in {time.perf_counter() - t:.0f} s: {items}", flush=True)
    extra = DATASET.format(items=items, s2=json.dumps(list(S2_10M + S2_20M)), s2_dates=S2_DATES, s1_dates=S1_DATES)
    rows = {k: {"samples_s": [], "cpu_ms": [], "daemon_ms": [], "client_ms": [], "faults": []} for k in LAYERS}
    with tempfile.TemporaryDirectory() as work:
        for run in range(a.runs):
            d = svc.Daemon(Path(work) / f"d{run}", {}, capacity_bytes=2 << 30, extra_toml=extra).start()
            try:
                epoch(d, LAYERS["whole"], a.samples)
                for key, layers in LAYERS.items():
                    perf = None
                    if a.perf and run == 0:
                        a.perf.mkdir(parents=True, exist_ok=True)
                        perf = subprocess.Popen(["perf", "record", "-F", "499", "--call-graph", a.call_graph, "-p", str(d.proc.pid), "-o",
                                                 str(a.perf / f"{key}.data")], stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
                        time.sleep(1)
                    wall, daemon_cpu, client_cpu, n, faults = epoch(d, layers, a.samples)
                    cpu = daemon_cpu + client_cpu
                    if perf:
                        perf.send_signal(signal.SIGINT)
                        perf.wait()
                    rows[key]["samples_s"].append(n / wall)
                    rows[key]["cpu_ms"].append(1000 * cpu / n)
                    rows[key]["daemon_ms"].append(1000 * daemon_cpu / n)
                    rows[key]["client_ms"].append(1000 * client_cpu / n)
                    rows[key]["faults"].append(faults / n)
                    print(f"run {run} {key:6}: {n} samples, {n / wall:7.1f} samples/s, "
                          f"{1000 * cpu / n:6.2f} ms CPU/sample (daemon {1000 * daemon_cpu / n:.2f}, "
                          f"client {1000 * client_cpu / n:.2f}), {faults / n:6.1f} page faults/sample", flush=True)
            finally:
                d.stop()
    print("\nmedians (warm):")
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in rows.items()}
    for k, m in med.items():
        print(f"  {k:6} {m['samples_s']:8.1f} samples/s  {m['cpu_ms']:6.2f} ms CPU/sample  "
              f"(daemon {m['daemon_ms']:.2f}, client {m['client_ms']:.2f}), {m['faults']:.1f} page faults/sample")
    if a.json:
        a.json.write_text(json.dumps({"medians": med, "raw": rows}, indent=1))


if __name__ == "__main__":
    main()
