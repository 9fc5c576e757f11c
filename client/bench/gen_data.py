#!/usr/bin/python3
"""Benchmark data: realistic 4-band uint16 COGs written by GDAL, one folder per compression.

Owns the scene content and the file layout, nothing else:

    ROOT/<size>px/<codec>/scene_NN.tif      codec in none, deflate, zstd, lzw, lerc_zstd

Scene NN of a given size is always the same pixels (seeded by NN and size), so a run with
fewer scenes reuses the first files of a bigger set. Content is spatially correlated, not
noise: a warped Voronoi field map (8 land-cover classes with per-class spectra, a per-field
brightness), water from a thresholded smooth field, straight roads (sharp edges), a smooth
illumination/terrain gradient, per-class texture and Gaussian sensor noise (sigma 12 DN).
Reflectance-like values (0..10000). 512 px tiles, predictor 2 where it applies (LERC is
lossless, MAX_Z_ERROR=0), GDAL's default overviews, UTM 33N at 10 m.

Idempotent: a file that exists is skipped; files are written under a temporary name and
renamed. Needs GDAL's Python bindings (Debian's /usr/bin/python3 has them) and numpy only.

    /usr/bin/python3 client/bench/gen_data.py [--root DIR] [--scenes 8] [--size 4096]
        [--compressions none,deflate,zstd,lzw,lerc_zstd] [--quick]

--quick: 4 scenes of 2048 px, DEFLATE only (a smoke test of the data path; run.py --quick
uses 4 scenes of 4096 px so that one epoch lasts long enough to measure).
"""

import argparse
import os
import sys
import time

import numpy as np

CODECS = {
    "none": ["COMPRESS=NONE"],
    "deflate": ["COMPRESS=DEFLATE", "PREDICTOR=2"],
    "zstd": ["COMPRESS=ZSTD", "PREDICTOR=2"],
    "lzw": ["COMPRESS=LZW", "PREDICTOR=2"],
    "lerc_zstd": ["COMPRESS=LERC_ZSTD", "MAX_Z_ERROR=0"],
}
TILE = 512
NOISE_DN = 12  # sensor noise, like Sentinel-2's 10 m bands
DEFAULT_ROOT = os.environ.get("COGFEED_BENCH_DATA", os.path.expanduser("~/.cache/cogfeed-bench/data"))

# Blue, green, red, NIR means per class (Sentinel-2-like surface reflectance x 10000).
SPECTRA = np.array([
    [400, 500, 300, 150],      # water
    [250, 450, 250, 3000],     # forest
    [500, 800, 600, 3600],     # crop
    [1200, 1500, 1800, 2500],  # bare soil
    [1500, 1600, 1700, 2200],  # built-up
    [400, 700, 500, 2800],     # grassland
    [900, 1100, 1300, 1900],   # sparse vegetation
    [1800, 1800, 1900, 2000],  # road
], dtype=np.float32)
TEXTURE = np.array([0.02, 0.10, 0.04, 0.06, 0.15, 0.05, 0.08, 0.02], dtype=np.float32)


def smooth(rng, n, cells):
    """Bilinear upsampling of a (cells+1)^2 random grid to n x n: smooth, values ~N(0,1)."""
    g = rng.standard_normal((cells + 1, cells + 1)).astype(np.float32)
    pos = np.linspace(0, cells, n, dtype=np.float32)
    i = np.minimum(pos.astype(np.int64), cells - 1)
    f = (pos - i)[:, None]
    rows = g[i] * (1 - f) + g[i + 1] * f  # (n, cells + 1)
    return rows[:, i] * (1 - f.T) + rows[:, i + 1] * f.T


def scene(index, n):
    """(4, n, n) uint16 pixels of scene `index`."""
    rng = np.random.default_rng(1000 * n + index)
    # Fields: Voronoi cells of warped coordinates, computed row block by row block.
    k = max(24, (n // 4096) ** 2 * 64)
    seeds = rng.uniform(0, n, (k, 2)).astype(np.float32)
    cls_of_seed = rng.choice([1, 2, 2, 3, 4, 5, 5, 6], size=k)
    gain_of_seed = rng.uniform(0.85, 1.15, k).astype(np.float32)
    wy = smooth(rng, n, 8) * (n / 60)
    wx = smooth(rng, n, 8) * (n / 60)
    cell = np.empty((n, n), np.int32)
    cols = np.arange(n, dtype=np.float32)
    s2 = (seeds ** 2).sum(1)
    for r0 in range(0, n, 256):
        rows = np.arange(r0, min(n, r0 + 256), dtype=np.float32)[:, None]
        y = (rows + wy[r0:r0 + len(rows)]).ravel()
        x = (cols[None, :] + wx[r0:r0 + len(rows)]).ravel()
        # argmin |p - s|^2 = argmin (|s|^2 - 2 p.s): one small matrix product per block.
        d = s2[None, :] - 2 * np.stack([y, x], 1) @ seeds.T
        cell[r0:r0 + len(rows)] = d.argmin(1).reshape(len(rows), n)
    cls = cls_of_seed[cell]
    gain = gain_of_seed[cell]
    del cell, wy, wx
    # Water where a smooth field is high; roads: straight lines a few pixels wide.
    cls[smooth(rng, n, 6) > 1.3] = 0
    coord = np.arange(n, dtype=np.float32)
    for _ in range(3):
        ang = rng.uniform(0, np.pi)
        py, px = rng.uniform(0.2 * n, 0.8 * n, 2)
        dist = np.abs(((coord - px) * np.sin(ang))[None, :] - ((coord - py) * np.cos(ang))[:, None])
        cls[dist < max(2, n // 1000)] = 7
    del dist
    illum = 1 + 0.12 * smooth(rng, n, 4)
    tex = smooth(rng, n, n // 16)
    scale = (illum * np.where(cls == 7, 1.0, gain) * (1 + TEXTURE[cls] * tex)).astype(np.float32)
    del illum, tex, gain
    out = np.empty((4, n, n), np.uint16)
    for b in range(4):
        v = SPECTRA[cls, b] * scale + rng.normal(0, NOISE_DN, (n, n)).astype(np.float32)
        out[b] = np.clip(v, 0, 10000).astype(np.uint16)
    return out


def write(path, pixels, codec):
    from osgeo import gdal, osr

    gdal.UseExceptions()
    c, n, _ = pixels.shape
    mem = gdal.GetDriverByName("MEM").Create("", n, n, c, gdal.GDT_UInt16)
    mem.SetGeoTransform((500000.0, 10.0, 0.0, 5200000.0, 0.0, -10.0))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    mem.SetProjection(srs.ExportToWkt())
    for b in range(c):
        mem.GetRasterBand(b + 1).WriteArray(pixels[b])
    tmp = path + ".part"
    opts = CODECS[codec] + [f"BLOCKSIZE={TILE}", "NUM_THREADS=ALL_CPUS"]
    gdal.Translate(tmp, mem, format="COG", creationOptions=opts)
    os.replace(tmp, path)


def paths(root, size, codec, scenes):
    return [os.path.join(root, f"{size}px", codec, f"scene_{i:02d}.tif") for i in range(scenes)]


def generate(root, scenes, size, codecs, log=print):
    """Writes whatever is missing; returns {codec: [paths]}."""
    out = {c: paths(root, size, c, scenes) for c in codecs}
    for i in range(scenes):
        todo = [c for c in codecs if not os.path.exists(out[c][i])]
        if not todo:
            continue
        t = time.time()
        px = scene(i, size)
        for c in todo:
            os.makedirs(os.path.dirname(out[c][i]), exist_ok=True)
            write(out[c][i], px, c)
        log(f"gen_data: scene {i} ({size} px) -> {','.join(todo)} in {time.time() - t:.1f}s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=DEFAULT_ROOT)
    ap.add_argument("--scenes", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--compressions")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    scenes = a.scenes or (4 if a.quick else 8)
    size = a.size or (2048 if a.quick else 4096)
    codecs = (a.compressions or ("deflate" if a.quick else ",".join(CODECS))).split(",")
    for c in codecs:
        if c not in CODECS:
            sys.exit(f"unknown compression {c} (one of {', '.join(CODECS)})")
    out = generate(a.root, scenes, size, codecs)
    for c, ps in out.items():
        total = sum(os.path.getsize(p) for p in ps)
        levels, n = 0, size
        while n >= TILE:  # full resolution and GDAL's overviews down to one tile
            levels += n * n
            n //= 2
        raw = scenes * 4 * 2 * levels
        print(f"{c:10s} {len(ps)} scenes {total / 1e6:8.1f} MB  ratio {raw / total:.2f}  {os.path.dirname(ps[0])}")


if __name__ == "__main__":
    main()
