#!/usr/bin/env python3
"""torchgeo's `RandomGeoSampler` over `cogfeed.torchgeo.CogfeedDataset` against torchgeo's own
`RasterDataset` on the same files, in the same run, plus the stream (`CogfeedStreamDataset`).

    python client/bench/torchgeo_bench.py [--data DIR] [--samples 512] [--size 256] [--runs 3]

Run it in a Python with torchgeo 0.10 and rasterio (the torchgeo venv of `.ci/test`:
`~/.cache/cogfeed-torchgeo-venv/bin/python`); uses `gdal_translate` (gdal-bin; else the same
COG driver through rasterio's bundled GDAL) and the
release daemon (`$CARGO_TARGET_DIR/release/cogfeed`, or `COGFEED_BIN_DIR`, or
`target/release`). Not part of CI.

The archive (written once into `--data`, default `~/.cache/cogfeed-bench/torchgeo`): `--scenes`
(2) side-by-side scenes of `--pixels` (4096) squared, EPSG:32632 at 10 m, each band
(B02, B03, B04, B08) its own COG: uint16 noise in 1..4095 (12-bit, as Sentinel-2 L2A), written
as a GeoTIFF by rasterio and made a COG by `gdal_translate -of COG -co BLOCKSIZE=1024
-co COMPRESS=DEFLATE -co PREDICTOR=2` (1024 x 1024 tiles), with a STAC Item per scene
(an asset per band: proj:epsg, proj:shape, proj:transform) so that the daemon serves them
as a map-space dataset, `bench` (crs EPSG:32632, one 4-band layer at 10 m, bilinear, as
torchgeo reads float32 images).

Measured, each run (after one warm-up pass of each; the files are in the page cache, so this
is the warm, decode-bound case), `--samples` samples of `--size` pixels squared, 4 bands to
float32, batches of 16 through a `DataLoader(collate_fn=stack_samples)` without workers,
in this process:

- `rasterdataset`: torchgeo's `RasterDataset` (separate files per band) + `RandomGeoSampler`;
- `cogfeed-geo`: `CogfeedDataset` + the same `RandomGeoSampler` (same seed: the same queries),
  a batch read in one `ReadFootprint` call;
- `cogfeed-stream`: `CogfeedStreamDataset` (the daemon's random sampler, same size).

Prints samples/s per run, then the median of the runs and the ratios to `rasterdataset`.
The daemon runs on the same machine (and cores) as the loader.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BANDS = ("B02", "B03", "B04", "B08")
EPSG, RES, X0, Y0 = 32632, 10.0, 600000.0, 5200000.0
BATCH = 16


def binary() -> str:
    dirs = [os.environ.get("COGFEED_BIN_DIR")]
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(os.path.join(os.environ["CARGO_TARGET_DIR"], "release"))
    dirs.append(str(ROOT / "target" / "release"))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "cogfeed")):
            return os.path.join(d, "cogfeed")
    sys.exit("cogfeed is not built: cargo build --release --bins (or set COGFEED_BIN_DIR)")


def write_archive(data: Path, scenes: int, pixels: int) -> Path:
    """The COGs and their STAC Items (idempotent: kept when items.json is there)."""
    import pyproj
    import rasterio
    import rasterio.shutil
    from rasterio.transform import from_origin

    items_path = data / "items.json"
    if items_path.exists():
        return items_path
    data.mkdir(parents=True, exist_ok=True)
    to_lonlat = pyproj.Transformer.from_crs(EPSG, 4326, always_xy=True)
    rng = np.random.default_rng(0)
    features = []
    for s in range(scenes):
        x0 = X0 + s * pixels * RES  # side by side, not overlapping
        transform = from_origin(x0, Y0, RES, RES)
        assets = {}
        for band in BANDS:
            name = f"scene_{s:02d}_{band}.tif"
            with tempfile.TemporaryDirectory(dir=data) as tmp:
                plain = os.path.join(tmp, "plain.tif")
                with rasterio.open(plain, "w", driver="GTiff", width=pixels, height=pixels, count=1, dtype="uint16",
                                   crs=f"EPSG:{EPSG}", transform=transform, nodata=0) as dst:
                    dst.write(rng.integers(1, 4096, size=(pixels, pixels), dtype=np.uint16), 1)
                if shutil.which("gdal_translate"):
                    subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", "BLOCKSIZE=1024", "-co",
                                    "COMPRESS=DEFLATE", "-co", "PREDICTOR=2", plain, str(data / name)], check=True)
                else:  # the same COG driver, in the GDAL rasterio bundles
                    rasterio.shutil.copy(plain, str(data / name), driver="COG", BLOCKSIZE=1024, COMPRESS="DEFLATE",
                                         PREDICTOR=2)
            assets[band] = {
                "href": name, "type": "image/tiff; application=geotiff; profile=cloud-optimized", "roles": ["data"],
                "proj:epsg": EPSG, "proj:shape": [pixels, pixels], "proj:transform": [RES, 0.0, x0, 0.0, -RES, Y0],
                "raster:bands": [{"data_type": "uint16", "nodata": 0, "spatial_resolution": RES}],
            }
        xs = [x0, x0 + pixels * RES, x0, x0 + pixels * RES]
        ys = [Y0, Y0, Y0 - pixels * RES, Y0 - pixels * RES]
        lon, lat = to_lonlat.transform(xs, ys)
        bbox = [min(lon), min(lat), max(lon), max(lat)]
        ring = [[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]
        features.append({
            "type": "Feature", "stac_version": "1.0.0", "id": f"scene_{s:02d}", "collection": "bench", "bbox": bbox,
            "geometry": {"type": "Polygon", "coordinates": [ring]},
            "properties": {"datetime": f"2024-06-{s + 1:02d}T10:00:00Z", "proj:epsg": EPSG}, "assets": assets,
        })
    tmp = items_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"type": "FeatureCollection", "features": features}, indent=1))
    tmp.rename(items_path)
    return items_path


CONFIG = """
[[datasets]]
name = "bench"
stac = "{items}"
crs = "EPSG:{epsg}"

[[datasets.layers]]
name = "image"
assets = {assets}
resolution = {res}
resampling = "bilinear"
"""


class Daemon:
    """`cogfeed serve` with the bench dataset on a free loopback port."""

    def __init__(self, items: Path, workdir: Path) -> None:
        config = workdir / "cogfeed.toml"
        config.write_text(CONFIG.format(items=items, epsg=EPSG, assets=json.dumps(list(BANDS)), res=RES))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{s.getsockname()[1]}"
        self.proc = subprocess.Popen([binary(), "serve", "--config", str(config), "--listen", self.address,
                                      "--metrics-listen", "127.0.0.1:0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        log = []
        for line in self.proc.stderr:
            log.append(line)
            if "grpc listening on" in line:
                break
        else:
            sys.exit(f"daemon exited with {self.proc.wait()}:\n" + "".join(log))
        threading.Thread(target=log.extend, args=(self.proc.stderr,), daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(os.environ.get(
        "COGFEED_BENCH_TORCHGEO", Path.home() / ".cache" / "cogfeed-bench" / "torchgeo")))
    p.add_argument("--scenes", type=int, default=2)
    p.add_argument("--pixels", type=int, default=4096)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()

    # torchgeo 0.10 deprecates RandomGeoSampler (for RandomPatchSampler): still the one measured.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import torch
    from torch.utils.data import DataLoader
    from torchgeo.datasets import RasterDataset, stack_samples
    from torchgeo.samplers import RandomGeoSampler

    from cogfeed.torchgeo import CogfeedDataset, CogfeedStreamDataset

    t = time.perf_counter()
    items = write_archive(a.data, a.scenes, a.pixels)
    print(f"archive: {a.data} ({a.scenes} scenes of {a.pixels}^2 x {len(BANDS)} bands, uint16, per-band COGs, "
          f"1024^2 DEFLATE tiles; {sum(f.stat().st_size for f in a.data.glob('*.tif')) / 1e6:.0f} MB; "
          f"{time.perf_counter() - t:.1f} s)", flush=True)

    class Bands(RasterDataset):
        filename_glob = "scene_*_B02.tif"
        filename_regex = r"^scene_(?P<scene>\d+)_(?P<band>B\d+)\.tif$"
        all_bands = BANDS
        separate_files = True
        is_image = True

    workdir = Path(tempfile.mkdtemp(prefix="cogfeed-tgbench-"))
    daemon = Daemon(items, workdir)
    try:
        raster = Bands(paths=str(a.data))
        geo = CogfeedDataset(daemon.address, "bench", layers=["image"])
        assert geo.crs.to_epsg() == raster.crs.to_epsg() == EPSG and geo.res == raster.res == (RES, RES)

        def sampled(ds, seed):
            sampler = RandomGeoSampler(ds, size=a.size, length=a.samples, generator=torch.Generator().manual_seed(seed))
            return DataLoader(ds, sampler=sampler, batch_size=BATCH, collate_fn=stack_samples)

        def stream(seed):
            ds = CogfeedStreamDataset(daemon.address, "bench", layers=["image"], patch_size=a.size,
                                      batch_size=BATCH, samples_per_epoch=a.samples, seed=seed)
            return DataLoader(ds, batch_size=BATCH, collate_fn=stack_samples)

        cases = {"rasterdataset": lambda seed: sampled(raster, seed), "cogfeed-geo": lambda seed: sampled(geo, seed),
                 "cogfeed-stream": stream}

        def rate(name, seed):
            start = time.perf_counter()
            n = 0
            for batch in cases[name](seed):
                assert tuple(batch["image"].shape[1:]) == (len(BANDS), a.size, a.size), batch["image"].shape
                n += len(batch["image"])
            assert n == a.samples, (name, n)
            return n / (time.perf_counter() - start)

        for name in cases:  # warm-up: page cache, GDAL's and the daemon's caches, connections
            rate(name, 1000)
        results = {name: [] for name in cases}
        for run in range(a.runs):
            for name in cases:  # interleaved, so drift on the machine hits each alike
                results[name].append(rate(name, run))
                print(f"run {run}: {name:15s} {results[name][-1]:8.1f} samples/s", flush=True)
        med = {name: statistics.median(v) for name, v in results.items()}
        print(f"\n{a.samples} samples of {a.size}x{a.size} px x {len(BANDS)} bands (float32), batches of {BATCH}, "
              f"no workers, median of {a.runs} runs:")
        for name, v in med.items():
            print(f"  {name:15s} {v:8.1f} samples/s   x{v / med['rasterdataset']:.2f} rasterdataset")
        print(f"  cogfeed-stream / cogfeed-geo: x{med['cogfeed-stream'] / med['cogfeed-geo']:.2f}")
    finally:
        daemon.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
