#!/usr/bin/python3
"""GDAL side of the cogfeed benchmarks (Debian's interpreter has the bindings).

  gdal_helper.py make OUT.tif CODEC SIZE      write a realistic 4-band uint16 COG, 512 px tiles
  gdal_helper.py decode FILE REPEATS          median seconds to decode every pixel, 1 thread
  gdal_helper.py windows URL C,R,W,H,L ...    read windows through /vsicurl/ (fresh open each)
"""
import sys
import time

import numpy as np
from osgeo import gdal

gdal.UseExceptions()


def make(out, codec, size):
    size = int(size)
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    bands = []
    # Spatially correlated content: smooth terrain, sharp-edged fields, sensor noise.
    fields = (np.floor(x / 173) + 3 * np.floor(y / 211)) % 7
    for b in range(4):
        terrain = 0.5 + 0.2 * np.sin(x / (140 + 30 * b)) * np.cos(y / (95 + 20 * b))
        v = terrain + 0.06 * fields + rng.normal(0, 0.004, size=x.shape).astype(np.float32)
        bands.append(np.clip(v * 12000, 0, 65535).astype(np.uint16))
    mem = gdal.GetDriverByName("MEM").Create("", size, size, 4, gdal.GDT_UInt16)
    mem.SetGeoTransform([600000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0])
    mem.SetProjection("EPSG:32632")
    for i, a in enumerate(bands):
        mem.GetRasterBand(i + 1).WriteArray(a)
    opts = ["BLOCKSIZE=512", "COMPRESS=" + codec, "NUM_THREADS=ALL_CPUS"]
    if codec in ("DEFLATE", "ZSTD", "LZW"):
        opts.append("PREDICTOR=2")
    if codec.startswith("LERC"):
        opts.append("MAX_Z_ERROR=0")
    gdal.GetDriverByName("COG").CreateCopy(out, mem, options=opts)


def decode(path, repeats):
    gdal.SetConfigOption("GDAL_NUM_THREADS", "1")
    gdal.SetCacheMax(64 * 1024 * 1024)
    times = []
    for _ in range(int(repeats)):
        ds = gdal.Open(path)
        t = time.perf_counter()
        ds.ReadRaster(0, 0, ds.RasterXSize, ds.RasterYSize)
        times.append(time.perf_counter() - t)
        ds = None
    times.sort()
    print(times[len(times) // 2])


def windows(url, specs):
    gdal.SetConfigOption("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR")
    for spec in specs:
        c, r, w, h, level = (int(v) for v in spec.split(","))
        gdal.VSICurlClearCache()
        ds = gdal.Open("/vsicurl/" + url)
        if level == 0:
            ds.ReadRaster(c, r, w, h)
        else:
            for b in range(ds.RasterCount):
                ds.GetRasterBand(b + 1).GetOverview(level - 1).ReadRaster(c, r, w, h)
        ds = None
        print("done", flush=True)
        sys.stdin.readline()


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(*sys.argv[2:5])
    elif cmd == "decode":
        decode(*sys.argv[2:4])
    elif cmd == "windows":
        windows(sys.argv[2], sys.argv[3:])
