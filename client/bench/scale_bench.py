#!/usr/bin/env python3
"""Time to first batch on a large stac-geoparquet dataset, cold and warm.

    python3 client/bench/scale_bench.py [--items 100000] [--tiles 100] [--runs 3] [--json OUT]

Writes `--tiles` small tiled GeoTIFFs (GDAL's `gdal_create`: 256 px, 10 m, uint16, in a grid of
UTM 32N tiles) and, for each, `--items / --tiles` dates: every Item's asset is its own hard link to
its tile's file (distinct URLs, so each reference asset is opened as a file of its own), then one
stac-geoparquet file of all the Items (pyarrow). A fresh `cogfeed serve` over it is timed from
process start to the first batch of a random stream (64 px, batch 4) received by the Python
client:
- cold: an empty index directory (the daemon parses the geoparquet and opens every drawable
  Item's reference asset, then writes its index);
- warm: the same again (the daemon reads its index back), medians of --runs.
The daemon's own log gives the phases (items read, reference assets opened, index).
"""

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))


def binary(name):
    for d in [os.environ.get("CARGO_TARGET_DIR", "") + "/release", str(ROOT / "target" / "release")]:
        p = Path(d) / name
        if p.exists():
            return str(p)
    sys.exit(f"build the release binaries first (cargo build --release): {name} not found")


def wkb_polygon(x0, y0, x1, y1):
    ring = [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)]
    return struct.pack("<BIII", 1, 3, 1, len(ring)) + b"".join(struct.pack("<dd", *p) for p in ring)


def write_archive(root: Path, items: int, tiles: int):
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_tile = max(1, items // tiles)
    side = int(tiles ** 0.5 + 0.999)
    (root / "tiles").mkdir(parents=True)
    (root / "links").mkdir()
    rows = []
    start = dt.datetime(2020, 1, 1, 10, 30, tzinfo=dt.timezone.utc)
    for t in range(tiles):
        # UTM 32N tiles 2.56 km wide from (600 000, 5 200 000), 1 km apart.
        x0 = 600_000 + (t % side) * 3_000
        y1 = 5_200_000 - (t // side) * 3_000
        tif = root / "tiles" / f"tile_{t:04d}.tif"
        subprocess.run(["gdal_create", "-q", "-of", "GTiff", "-outsize", "256", "256", "-bands", "1",
                        "-ot", "UInt16", "-burn", str(100 + t), "-a_srs", "EPSG:32632",
                        "-a_ullr", str(x0), str(y1), str(x0 + 2560), str(y1 - 2560),
                        "-co", "TILED=YES", "-co", "BLOCKXSIZE=256", "-co", "BLOCKYSIZE=256",
                        "-co", "COMPRESS=DEFLATE", str(tif)], check=True)
        # Lon/lat bbox, roughly (the daemon only prunes with it).
        lon0, lat1 = 10.3 + (x0 - 600_000) / 76_000, 46.95 - (5_200_000 - y1) / 111_000
        bbox = (lon0 - 0.01, lat1 - 0.04, lon0 + 0.045, lat1 + 0.01)
        for d in range(per_tile):
            link = root / "links" / f"t{t:04d}_d{d:05d}.tif"
            os.link(tif, link)
            rows.append({
                "type": "Feature", "stac_version": "1.0.0", "id": f"T{t:04d}_{d:05d}",
                "geometry": wkb_polygon(*bbox),
                "bbox": {"xmin": bbox[0], "ymin": bbox[1], "xmax": bbox[2], "ymax": bbox[3]},
                "collection": "scale", "datetime": start + dt.timedelta(days=d),
                "proj:epsg": 32632,
                "assets": {"B04": {"href": str(link), "type": "image/tiff; application=geotiff"}},
            })
    schema = pa.schema([
        ("type", pa.string()), ("stac_version", pa.string()), ("id", pa.string()),
        ("geometry", pa.binary()),
        ("bbox", pa.struct([("xmin", pa.float64()), ("ymin", pa.float64()), ("xmax", pa.float64()),
                            ("ymax", pa.float64())])),
        ("collection", pa.string()), ("datetime", pa.timestamp("us", tz="UTC")), ("proj:epsg", pa.int64()),
        ("assets", pa.struct([("B04", pa.struct([("href", pa.string()), ("type", pa.string())]))])),
    ])
    path = root / "items.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


CONFIG = """
[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{mport}"

[cache]
index_dir = "{index}"

[[datasets]]
name = "scale"
stac = "{url}"
crs = "native"

[[datasets.layers]]
name = "image"
assets = ["B04"]
resolution = 10
"""


def first_batch_seconds(config: Path, port: int, log: Path):
    import cogfeed

    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen([binary("cogfeed"), "serve", "--config", str(config)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        address = f"127.0.0.1:{port}"
        while True:
            if proc.poll() is not None:
                sys.exit(f"the daemon exited: see {log}")
            try:
                loader = cogfeed.Loader(address, "scale", patch_size=64, batch_size=4, max_batches=1, seed=1)
                batch = next(iter(loader))
                break
            except Exception:  # not listening yet
                time.sleep(0.05)
        assert batch["image"].shape == (4, 1, 64, 64)
        return time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--tiles", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--keep", help="write the archive here and keep it")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cogfeed-scale-"))
    try:
        t = time.monotonic()
        url = root / "items.parquet"
        if not url.exists():
            url = write_archive(root, args.items, args.tiles)
        print(f"archive: {args.items} items over {args.tiles} tiles, {url.stat().st_size / 1e6:.1f} MB of "
              f"geoparquet ({time.monotonic() - t:.0f} s to write)", flush=True)
        index = root / "index"
        shutil.rmtree(index, ignore_errors=True)
        port, mport = 50731, 9731
        config = root / "scale.toml"
        config.write_text(CONFIG.format(port=port, mport=mport, index=index, url=url))
        cold = first_batch_seconds(config, port, root / "cold.log")
        print(f"cold: {cold:.2f} s to the first batch", flush=True)
        warm = []
        for k in range(args.runs):
            warm.append(first_batch_seconds(config, port, root / f"warm{k}.log"))
            print(f"warm: {warm[-1]:.2f} s", flush=True)
        for name in ["cold.log", "warm0.log"]:
            print(f"--- {name}")
            for line in (root / name).read_text().splitlines():
                if "items read" in line or "opened" in line or "index" in line:
                    print(line)
        result = {"items": args.items, "tiles": args.tiles, "cold_s": cold, "warm_s": statistics.median(warm),
                  "warm_runs": warm}
        print(json.dumps(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
