#!/usr/bin/python3
"""How far cogfeed's projections (proj4rs, `cogfeed_server::grid::Transformer`) are from GDAL/PROJ,
and how fast each is.

For each case, draws N points (seeded) in the source CRS, transforms them with
  - GDAL/PROJ: osr.CoordinateTransformation, OAMS_TRADITIONAL_GIS_ORDER (x = easting / longitude
    first), the reference;
  - proj4rs: server/examples/proj_accuracy.rs (reads points on stdin, writes them transformed);
and prints the largest and the 99th-percentile distance between the two in metres (for a geographic
target, the distance on a sphere of radius 6371 km: enough for errors far below a kilometre) and in
pixels of 10 m, plus single-thread throughput in points per second:
  - proj4rs: `Transformer::transform` on the batch, timed inside the example (release build);
  - OCT: GDAL's OCTTransformEx called through ctypes on numpy arrays (PROJ's own speed, one thread);
  - osr: osr.CoordinateTransformation.TransformPoints from Python (what a Python caller gets,
    including the conversion of the points to and from Python tuples).

Run with Debian's interpreter (GDAL 3.6 bindings, numpy):

    cargo build --release -p cogfeed-server --example proj_accuracy
    /usr/bin/python3 tools/proj_accuracy.py [--points 10000] [--seed 7] [--bin PATH] [--json OUT]

--bin defaults to $CARGO_TARGET_DIR (else ./target) /release/examples/proj_accuracy. The output is a
Markdown table (the README's "Projections" section).
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import time

import numpy as np
from osgeo import osr

osr.UseExceptions()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EARTH_RADIUS = 6371008.8


def uniform(rng, n, xlo, xhi, ylo, yhi):
    return rng.uniform(xlo, xhi, n), rng.uniform(ylo, yhi, n)


def lonlat_zone(zone):
    cm = -183.0 + 6.0 * zone
    # The zone's own 6° plus 1.5° either side (what a tile straddling the zone edge reaches), 0-84°N.
    return lambda rng, n: uniform(rng, n, cm - 4.5, cm + 4.5, 0.0, 84.0)


def utm_plane(rng, n):
    # Up to 300 km either side of the central meridian, equator to 80°N.
    return uniform(rng, n, 200000.0, 800000.0, 0.0, 8.9e6)


CASES = [  # (name, src, dst, point generator in src)
    ('32632 → 4326', 32632, 4326, utm_plane),
    ('4326 → 32632', 4326, 32632, lonlat_zone(32)),
    ('32633 → 4326', 32633, 4326, utm_plane),
    ('4326 → 32633', 4326, 32633, lonlat_zone(33)),
    ('32617 → 4326', 32617, 4326, utm_plane),
    ('4326 → 32617', 4326, 32617, lonlat_zone(17)),
    ('32618 → 4326', 32618, 4326, utm_plane),
    ('4326 → 32618', 4326, 32618, lonlat_zone(18)),
    # Cross zone: zone 33 points up to 300 km from its central meridian (15°E), 36-58°N, read in
    # zone 32 (up to ~700 km from 9°E).
    ('32633 → 32632', 32633, 32632, lambda rng, n: uniform(rng, n, 200000.0, 800000.0, 4.0e6, 6.5e6)),
    ('4326 → 3857', 4326, 3857, lambda rng, n: uniform(rng, n, -180.0, 180.0, -85.0, 85.0)),
    # Areas of use: ETRS89-LAEA Europe, CONUS Albers, Antarctic and Arctic polar stereographic.
    ('4326 → 3035', 4326, 3035, lambda rng, n: uniform(rng, n, -30.0, 44.0, 25.0, 84.0)),
    ('4326 → 5070', 4326, 5070, lambda rng, n: uniform(rng, n, -125.0, -66.0, 24.0, 50.0)),
    ('4326 → 3031', 4326, 3031, lambda rng, n: uniform(rng, n, -180.0, 180.0, -90.0, -60.0)),
    ('4326 → 3413', 4326, 3413, lambda rng, n: uniform(rng, n, -180.0, 180.0, 60.0, 90.0)),
    # A UTM 33N tile read into LAEA Europe.
    ('32633 → 3035', 32633, 3035, lambda rng, n: uniform(rng, n, 200000.0, 800000.0, 4.0e6, 7.5e6)),
]


def srs(epsg):
    s = osr.SpatialReference()
    s.ImportFromEPSG(epsg)
    s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    return s


def is_geographic(epsg):
    return bool(srs(epsg).IsGeographic())


def load_oct():
    name = ctypes.util.find_library('gdal') or 'libgdal.so'
    lib = ctypes.CDLL(name)
    f = lib.OCTTransformEx
    dp = ctypes.POINTER(ctypes.c_double)
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, dp, dp, dp, ctypes.POINTER(ctypes.c_int)]
    f.restype = ctypes.c_int
    return f


def timed(fn, min_secs):
    rounds, start = 0, time.perf_counter()
    while True:
        fn()
        rounds += 1
        el = time.perf_counter() - start
        if el >= min_secs:
            return rounds, el


def gdal_reference(src, dst, xs, ys, oct_fn, bench):
    ct = osr.CoordinateTransformation(srs(src), srs(dst))
    pts = list(zip(xs.tolist(), ys.tolist()))
    out = np.array(ct.TransformPoints(pts), dtype=float)[:, :2]
    # PROJ returns inf for points outside a projection's domain.
    out[~np.isfinite(out).all(axis=1)] = np.nan
    speeds = {}
    if bench > 0:
        r, el = timed(lambda: ct.TransformPoints(pts), bench)
        speeds['osr'] = r * len(pts) / el
        handle = ctypes.c_void_p(int(ct.this))
        n = len(xs)
        bx, by, bz = np.empty(n), np.empty(n), np.zeros(n)
        ok = np.empty(n, dtype=np.intc)
        dp = ctypes.POINTER(ctypes.c_double)

        def run():
            bx[:] = xs
            by[:] = ys
            bz[:] = 0.0
            oct_fn(handle, n, bx.ctypes.data_as(dp), by.ctypes.data_as(dp), bz.ctypes.data_as(dp),
                   ok.ctypes.data_as(ctypes.POINTER(ctypes.c_int)))
        run()
        assert np.allclose(np.column_stack([bx, by])[ok != 0], out[ok != 0], rtol=0, atol=1e-9, equal_nan=True)
        r, el = timed(run, bench)
        speeds['oct'] = r * n / el
    return out, speeds


def proj4rs(binary, src, dst, xs, ys, bench):
    text = ''.join('%r %r\n' % (float(x), float(y)) for x, y in zip(xs, ys))
    p = subprocess.run([binary, 'EPSG:%d' % src, 'EPSG:%d' % dst, '--bench-secs', repr(bench)],
                       input=text.encode(), capture_output=True, check=False)
    if p.returncode != 0:
        raise SystemExit('%s failed (%d): %s' % (binary, p.returncode, p.stderr.decode().strip()))
    out = np.array([[float(v) for v in line.split()] for line in p.stdout.decode().splitlines()])
    speed = None
    if bench > 0:
        speed = json.loads(p.stderr.decode().strip().splitlines()[-1])['points_per_sec']
    return out, speed


def distances(dst_geographic, ref, got):
    if dst_geographic:
        lat = np.radians(ref[:, 1])
        dlon = np.radians((got[:, 0] - ref[:, 0] + 180.0) % 360.0 - 180.0)
        dlat = np.radians(got[:, 1] - ref[:, 1])
        return EARTH_RADIUS * np.hypot(dlat, dlon * np.cos(lat))
    return np.hypot(got[:, 0] - ref[:, 0], got[:, 1] - ref[:, 1])


def fmt_m(v):
    if v == 0:
        return '0'
    if v < 1e-3:
        return '%.1e' % v
    if v < 10:
        return '%.4f' % v
    return '%.1f' % v


def fmt_rate(v):
    return '—' if v is None else '%.2f M' % (v / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--points', type=int, default=10000)
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--bench-secs', type=float, default=0.5, help='timing per case and library (0: no timing)')
    target = os.environ.get('CARGO_TARGET_DIR') or os.path.join(ROOT, 'target')
    ap.add_argument('--bin', default=os.path.join(target, 'release', 'examples', 'proj_accuracy'))
    ap.add_argument('--filter', default=None, help='substring of the case name')
    ap.add_argument('--json', default=None, help='also write the results here')
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit('%s: not built (cargo build --release -p cogfeed-server --example proj_accuracy)' % args.bin)
    oct_fn = load_oct() if args.bench_secs > 0 else None
    rows = []
    print('| case | points | failed (proj4rs / PROJ) | max error (m) | p99 (m) | max (px @ 10 m) | p99 (px) '
          '| proj4rs pts/s | PROJ via OCTTransform pts/s | osr.TransformPoints pts/s |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for k, (name, src, dst, gen) in enumerate(CASES):
        if args.filter and args.filter not in name:
            continue
        rng = np.random.default_rng(args.seed * 1000 + k)
        xs, ys = gen(rng, args.points)
        ref, speeds = gdal_reference(src, dst, xs, ys, oct_fn, args.bench_secs)
        got, rate = proj4rs(args.bin, src, dst, xs, ys, args.bench_secs)
        ok_ref = np.isfinite(ref).all(axis=1)
        ok_got = np.isfinite(got).all(axis=1)
        both = ok_ref & ok_got
        d = distances(is_geographic(dst), ref[both], got[both])
        mx = float(d.max()) if d.size else float('nan')
        p99 = float(np.percentile(d, 99)) if d.size else float('nan')
        worst = int(np.argmax(d)) if d.size else None
        row = {'case': name, 'src': src, 'dst': dst, 'points': args.points,
               'failed_proj4rs': int((~ok_got).sum()), 'failed_proj': int((~ok_ref).sum()),
               'failed_only_proj4rs': int((ok_ref & ~ok_got).sum()),
               'max_m': mx, 'p99_m': p99, 'max_px10': mx / 10.0, 'p99_px10': p99 / 10.0,
               'worst_point': None if worst is None else [float(xs[both][worst]), float(ys[both][worst])],
               'proj4rs_pts_per_s': rate, 'proj_oct_pts_per_s': speeds.get('oct'),
               'osr_pts_per_s': speeds.get('osr')}
        rows.append(row)
        print('| %s | %d | %d / %d | %s | %s | %s | %s | %s | %s | %s |' % (
            name, args.points, row['failed_proj4rs'], row['failed_proj'], fmt_m(mx), fmt_m(p99),
            fmt_m(mx / 10.0), fmt_m(p99 / 10.0), fmt_rate(rate), fmt_rate(speeds.get('oct')),
            fmt_rate(speeds.get('osr'))))
        sys.stdout.flush()
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    for r in rows:
        if r['worst_point'] is not None and r['max_m'] > 0.01:
            print('%s: worst at %s (%s m)' % (r['case'], r['worst_point'], fmt_m(r['max_m'])))


if __name__ == '__main__':
    main()
