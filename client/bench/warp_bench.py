#!/usr/bin/env python3
"""Map-space benchmarks (warp issue): cogfeed's warper against GDAL, the native-CRS STAC path against
the pixel-space path, and store bytes of k = 4 jobs over a STAC dataset.

    /usr/bin/python3 client/bench/warp_bench.py [--parts A,B,C] [--runs 3] [--cases 40] [--json OUT.json]

Needs Debian's python3-gdal (3.6) and numpy, and release builds in $CARGO_TARGET_DIR (default
target/): `cargo build --release --bins --example warp_bench`. Writes the embedded demo STAC archive
(two 512 px Sentinel-2-like tiles in EPSG:32632/32633, bands at 10 and 20 m, a land-cover raster in
EPSG:4326) under --work (default /tmp/cogfeed-warp-bench) with `warp_bench --write-demo`.

A  warped samples per CPU-second, one thread, in process, same footprints, kernels and sources.
   GDAL: gdal.Warp to MEM as /work/shared/conformance/gdal_warp_reader.py calls it (sources in reverse
   priority, srcNodata, dstNodata, outputType, multithread=False, errorThreshold=0, GDAL_NUM_THREADS=1),
   with the sources opened once (datasets kept open, so the block cache stays warm) and one untimed
   pass first; the timed call includes ReadAsArray. cogfeed: server/examples/warp_bench.rs with
   RAYON_NUM_THREADS=1 (sources opened once, one untimed pass fills the tile cache; the timed call
   includes the conversion to the output type). CPU = process CPU (time.process_time / /proc), so
   any helper thread counts. Every case's output is checked against GDAL's (conformance tolerances)
   so the two time the same work. Groups (64 x 64 px footprints, --cases random ones each):
     nearest, bilinear, cubic, average    B04 of the 32632 tile onto EPSG:32632 at 10 m, sub-pixel offsets
     mode                                 land cover (EPSG:4326, ~8 x 11 m) onto EPSG:32632 at 10 m
     reproject-bilinear                   B04 of the 32632 tile onto EPSG:32633 at 10 m (cross-zone)
     reproject-nearest                    the same with nearest
     upsample-bilinear                    B11 (20 m) onto EPSG:32632 at 10 m
     downsample-average                   B04 (10 m) onto EPSG:32632 at 20 m
     mosaic-bilinear                      B04 of both tiles (priority 33TUM, 32TQS) onto EPSG:32633, across the seam
B  CPU (daemon + client) per delivered GB: a STAC dataset with one native-CRS nearest layer (B04, 10 m)
   against a scene dataset of the same two B04 files (pixel space), cogfeed-client bench --sampler
   random --patch-size 128 --batch-size 16, warm cache (one untimed bench first). Target stac/scenes <= 1.1.
C  cogfeed_store_bytes_total of k = 4 concurrent identical jobs (different job names) against one job,
   each on a fresh daemon, over the STAC dataset. Target <= 1.05.
Figures are medians of --runs runs.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
T32, T33, LC = 'S2A_32TQS_20240603_DEMO', 'S2A_33TUM_20240603_DEMO', 'LC_DEMO_2024'
# Full-resolution grids of the two tiles (demo_stac.rs): origin, 10 m, 512 px.
TILES = {T32: (725000.0, 5157000.0), T33: (269000.0, 5157500.0)}
TILE_M = 5120.0
FP = 64   # footprint size in px
RESAMPLING = {'nearest': 'near', 'bilinear': 'bilinear', 'cubic': 'cubic', 'average': 'average', 'mode': 'mode'}
EXACT = ('nearest', 'mode')


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def target_dir():
    return os.environ.get('CARGO_TARGET_DIR') or os.path.join(ROOT, 'target')


def binary(*parts):
    p = os.path.join(target_dir(), 'release', *parts)
    if not os.path.exists(p):
        sys.exit('warp_bench: %s missing: cargo build --release --bins --example warp_bench' % p)
    return p


# ------------------------------------------------------------------------------------------ cases
def transformer(src, dst):
    from osgeo import osr
    a, b = osr.SpatialReference(), osr.SpatialReference()
    a.ImportFromEPSG(src)
    b.ImportFromEPSG(dst)
    for s in (a, b):
        s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    return osr.CoordinateTransformation(a, b)


def inside_tile(tx, tile, x, y, margin):
    """Whether (x, y) transformed by tx lies in `tile`'s valid west 75 % with `margin` metres to spare."""
    x0, y0 = TILES[tile]
    px, py, _ = tx.TransformPoint(x, y)
    return x0 + margin <= px <= x0 + 0.75 * TILE_M - margin and y0 - TILE_M + margin <= py <= y0 - margin


def make_cases(items, n, seed):
    rnd = random.Random(seed)
    cases = []

    def case(group, ids, asset, epsg, x, ytop, res, kernel, nodata=0):
        size = FP * res
        b = [round(x, 2), round(ytop - size, 2), round(x + size, 2), round(ytop, 2)]
        cases.append(dict(group=group, items=items, ids=ids, assets=[asset], crs='EPSG:%d' % epsg, bounds=b,
                          resolution=res, resampling=kernel, nodata=nodata))

    x0, y0 = TILES[T32]

    def in32(res):
        size = FP * res
        return (x0 + 100 + rnd.random() * (0.7 * TILE_M - size - 200),
                y0 - 100 - rnd.random() * (TILE_M - size - 200))

    for kernel in ('nearest', 'bilinear', 'cubic', 'average'):
        for _ in range(n):
            x, y = in32(10)
            case(kernel, [T32], 'B04', 32632, x, y, 10, kernel)
    # Land cover around its centre (12.0 E, 46.505 N) in EPSG:32632.
    cx, cy, _ = transformer(4326, 32632).TransformPoint(12.0, 46.505)
    for _ in range(n):
        case('mode', [LC], 'classes', 32632, cx - 1900 + rnd.random() * 3200, cy - 1300 + rnd.random() * 3200, 10,
             'mode', 255)
    # The 32632 tile seen from zone 33: footprints whose four corners fall in its valid part.
    t33to32 = transformer(32633, 32632)
    t32to33 = transformer(32632, 32633)
    for kernel in ('bilinear', 'nearest'):
        k = 0
        while k < n:
            px, py = in32(10)
            x, y, _ = t32to33.TransformPoint(px + 320, py - 320)
            x, y = x - 320, y + 320
            if all(inside_tile(t33to32, T32, x + dx, y - dy, 60) for dx in (0, 640) for dy in (0, 640)):
                case('reproject-' + kernel, [T32], 'B04', 32633, x, y, 10, kernel)
                k += 1
    for _ in range(n):
        x, y = in32(10)
        case('upsample-bilinear', [T32], 'B11', 32632, x, y, 10, 'bilinear')
    for _ in range(n):
        x, y = in32(20)
        case('downsample-average', [T32], 'B04', 32632, x, y, 20, 'average')
    # Across the seam: the 33TUM tile's west edge (wedge there) under the 32TQS tile's east part.
    ux, uy = TILES[T33]
    for _ in range(n):
        x = ux - 200 + rnd.random() * 900
        y = uy - 300 - rnd.random() * (TILE_M - 640 - 600)
        case('mosaic-bilinear', [T33, T32], 'B04', 32633, x, y, 10, 'bilinear')
    return cases


# ------------------------------------------------------------------------------------------ GDAL
class GdalBench:
    def __init__(self, items_path):
        from osgeo import gdal
        gdal.UseExceptions()
        gdal.SetConfigOption('GDAL_NUM_THREADS', '1')
        gdal.SetConfigOption('GDAL_DISABLE_READDIR_ON_OPEN', 'EMPTY_DIR')
        self.gdal = gdal
        with open(items_path) as f:
            self.items = {ft['id']: ft for ft in json.load(f)['features']}
        self.base = os.path.dirname(os.path.abspath(items_path))
        self.open = {}

    def prepare(self, c):
        gdal = self.gdal
        srcs, snd = [], None
        for i in c['ids']:
            ad = self.items[i]['assets'][c['assets'][0]]
            path = os.path.join(self.base, ad['href'])
            if path not in self.open:
                self.open[path] = gdal.Open(path)
            srcs.append(self.open[path])
            rb = ad['raster:bands']
            snd = ' '.join(repr(float(b['nodata'])) for b in rb)
            dt = rb[0]['data_type']
        gtype = {'uint16': gdal.GDT_UInt16, 'uint8': gdal.GDT_Byte}[dt]
        opts = gdal.WarpOptions(format='MEM', outputBounds=c['bounds'], xRes=c['resolution'], yRes=c['resolution'],
                                dstSRS=c['crs'], resampleAlg=RESAMPLING[c['resampling']], srcNodata=snd,
                                dstNodata=c['nodata'], outputType=gtype, multithread=False, errorThreshold=0)
        return list(reversed(srcs)), opts

    def warp(self, prepared):
        srcs, opts = prepared
        ds = self.gdal.Warp('', srcs, options=opts)
        arr = ds.ReadAsArray()
        return arr[None] if arr.ndim == 2 else arr

    def run(self, cases, min_secs):
        groups = {}
        for c in cases:
            groups.setdefault(c['group'], []).append((c, self.prepare(c)))
        outputs = [self.warp(self.prepare(c)) for c in cases]   # untimed pass: warm block cache
        result = {}
        for g, mine in groups.items():
            c0, t0 = time.process_time(), time.perf_counter()
            it = samples = 0
            while it == 0 or time.perf_counter() - t0 < min_secs:
                for _, p in mine:
                    samples += self.warp(p).size
                it += 1
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            result[g] = dict(cases=len(mine), iterations=it, samples=samples, cpu_s=cpu, wall_s=wall,
                             samples_per_cpu_s=samples / cpu)
        return result, outputs


def rust_bench(cases_path, min_secs, out=None):
    env = dict(os.environ, RAYON_NUM_THREADS='1')
    cmd = [binary('examples', 'warp_bench'), cases_path, '--min-secs', str(min_secs)]
    if out:
        cmd += ['--out', out]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit('warp_bench failed: %s' % r.stderr.strip())
    return json.loads(r.stdout)


def compare(cases, gdal_out, rust_report, blob_path):
    """Per group: cases that pass the conformance tolerances, and the worst case's figures."""
    blob = open(blob_path, 'rb').read()
    per = {}
    for c, g, meta in zip(cases, gdal_out, rust_report['cases_out']):
        dt = np.dtype(meta['dtype']).newbyteorder('<')
        r = np.frombuffer(blob, dt, count=meta['bytes'] // dt.itemsize, offset=meta['offset']).reshape(meta['shape'])
        s = per.setdefault(c['group'], dict(cases=0, ok=0, worst_frac=1.0, worst_max_abs=0.0))
        s['cases'] += 1
        if r.shape != g.shape:
            s['worst_frac'] = 0.0
            continue
        a, b = r.astype(np.float64), g.astype(np.float64)
        if c['resampling'] in EXACT:
            frac = float(np.mean(a == b))
            ok = frac >= 0.999
            mx = float(np.max(np.abs(a - b)))
        else:
            valid = b != c['nodata']
            rng = float(b[valid].max() - b[valid].min()) if valid.any() else 0.0
            within = max(1.0, 0.002 * rng)
            d = np.abs(a - b)
            frac = float(np.mean(d <= within))
            mx = float(d.max())
            ok = frac >= 0.995 and mx <= max(within, 0.05 * rng)
        s['ok'] += ok
        s['worst_frac'] = min(s['worst_frac'], frac)
        s['worst_max_abs'] = max(s['worst_max_abs'], mx)
    return per


def part_a(args, items):
    cases = make_cases(items, args.cases, args.seed)
    cases_path = os.path.join(args.work, 'warp_cases.json')
    with open(cases_path, 'w') as f:
        json.dump(cases, f)
    gb = GdalBench(items)
    gdal_runs, rust_runs, gdal_out, check = [], [], None, None
    for run in range(args.runs):
        g, outs = gb.run(cases, args.min_secs)
        gdal_runs.append(g)
        gdal_out = gdal_out or outs
        blob = os.path.join(args.work, 'warp_out.bin') if run == 0 else None
        r = rust_bench(cases_path, args.min_secs, blob)
        rust_runs.append(r['per_group'])
        if run == 0:
            check = compare(cases, gdal_out, r, blob)
        log('A run %d: %s' % (run + 1, ', '.join('%s %.2fx' % (k, r['per_group'][k]['samples_per_cpu_s'] /
                                                                 g[k]['samples_per_cpu_s']) for k in g)))
    rows = {}
    for grp in gdal_runs[0]:
        gs = statistics.median(x[grp]['samples_per_cpu_s'] for x in gdal_runs)
        rs = statistics.median(x[grp]['samples_per_cpu_s'] for x in rust_runs)
        rows[grp] = dict(gdal_msamples_per_cpu_s=gs / 1e6, cogfeed_msamples_per_cpu_s=rs / 1e6,
                         ratio=rs / gs, ratios=[r[grp]['samples_per_cpu_s'] / g[grp]['samples_per_cpu_s']
                                                for g, r in zip(gdal_runs, rust_runs)],
                         agree='%d/%d' % (check[grp]['ok'], check[grp]['cases']),
                         worst_frac=check[grp]['worst_frac'], worst_max_abs=check[grp]['worst_max_abs'])
    print('\nA. Warped samples per CPU-second, one thread (64x64 px footprints, %d per group; median of %d)'
          % (args.cases, args.runs))
    print('| case | GDAL 3.6 Msamples/s/core | cogfeed Msamples/s/core | cogfeed / GDAL | target | outputs agree |')
    print('|---|---:|---:|---:|---|---|')
    for grp, r in rows.items():
        print('| %s | %.2f | %.2f | %.2fx | >= 2x %s | %s (worst: %.2f%% within tol, max |d| %g) |'
              % (grp, r['gdal_msamples_per_cpu_s'], r['cogfeed_msamples_per_cpu_s'], r['ratio'],
                 'PASS' if r['ratio'] >= 2 else 'MISS', r['agree'], 100 * r['worst_frac'], r['worst_max_abs']))
    return rows


# ------------------------------------------------------------------------------------------ daemon
def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    with open('/proc/%d/stat' % pid) as f:
        rest = f.read().rsplit(')', 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf('SC_CLK_TCK')


class Daemon:
    def __init__(self, work, items, tiff):
        self.port, self.mport = free_port(), free_port()
        cfg = os.path.join(work, 'daemon_%d.toml' % self.port)
        scenes = [os.path.join(tiff, '%s_B04.tif' % t) for t in (T32, T33)]
        with open(cfg, 'w') as f:
            f.write('[cache]\ncapacity_bytes = 1073741824\n\n'
                    '[[datasets]]\nname = "scenes"\nscenes = %s\n\n'
                    '[[datasets]]\nname = "stac"\nstac = %s\ncrs = "native"\n'
                    '[[datasets.layers]]\nname = "b04"\nassets = ["B04"]\nresolution = 10.0\nresampling = "nearest"\n'
                    % (json.dumps(scenes), json.dumps(items)))
        self.log = open(os.path.join(work, 'daemon_%d.log' % self.port), 'w')
        self.p = subprocess.Popen([binary('cogfeed'), 'serve', '--config', cfg, '--log-format', 'json',
                                   '--listen', '127.0.0.1:%d' % self.port,
                                   '--metrics-listen', '127.0.0.1:%d' % self.mport],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if self.p.poll() is not None:
                sys.exit('daemon exited: see %s' % self.log.name)
            try:
                urllib.request.urlopen('http://127.0.0.1:%d/readyz' % self.mport, timeout=1).read()
                return
            except Exception:
                time.sleep(0.1)
        sys.exit('daemon not ready: see %s' % self.log.name)

    def cpu(self):
        return proc_cpu(self.p.pid)

    def metric(self, name):
        text = urllib.request.urlopen('http://127.0.0.1:%d/metrics' % self.mport, timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + '{') or line.startswith(name + ' '):
                total += float(line.rsplit(' ', 1)[1])
        return total

    def bench(self, dataset, duration, job='cli', extra=()):
        cmd = [binary('cogfeed-client'), '--server', '127.0.0.1:%d' % self.port, 'bench', '--dataset', dataset,
               '--sampler', 'random', '--patch-size', '128', '--batch-size', '16', '--duration', str(duration),
               '--job', job] + list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit('cogfeed-client failed: %s' % r.stderr.strip()[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def part_b(args, items, tiff):
    d = Daemon(args.work, items, tiff)
    runs = {'scenes': [], 'stac': []}
    try:
        for ds in runs:   # warm the cache and both paths
            d.bench(ds, 2)
        for run in range(args.runs):
            for ds in ('scenes', 'stac') if run % 2 == 0 else ('stac', 'scenes'):
                c0 = d.cpu()
                r = d.bench(ds, args.duration)
                daemon_cpu = d.cpu() - c0
                gb = r['bytes'] / 1e9
                client_cpu = r['client_cpu_s_per_gb'] * gb
                runs[ds].append(dict(mb_per_s=r['mb_per_s'], bytes=r['bytes'], daemon_cpu_s=daemon_cpu,
                                     client_cpu_s=client_cpu, cpu_s_per_gb=(daemon_cpu + client_cpu) / gb,
                                     daemon_cpu_s_per_gb=daemon_cpu / gb))
                log('B run %d %s: %.0f MB/s, %.1f CPU-s/GB (daemon %.1f)' % (
                    run + 1, ds, r['mb_per_s'], runs[ds][-1]['cpu_s_per_gb'], runs[ds][-1]['daemon_cpu_s_per_gb']))
    finally:
        d.stop()
    med = {ds: {k: statistics.median(x[k] for x in v) for k in ('mb_per_s', 'cpu_s_per_gb', 'daemon_cpu_s_per_gb')}
           for ds, v in runs.items()}
    ratio = med['stac']['cpu_s_per_gb'] / med['scenes']['cpu_s_per_gb']
    print('\nB. CPU per delivered GB, B04 uint16, random 128 px patches, batch 16, warm cache, %g s (median of %d)'
          % (args.duration, args.runs))
    print('| dataset | MB/s | CPU-s/GB (daemon + client) | daemon CPU-s/GB |')
    print('|---|---:|---:|---:|')
    for ds in ('scenes', 'stac'):
        print('| %s | %.0f | %.2f | %.2f |' % (
            {'scenes': 'scenes (pixel space)', 'stac': 'STAC, native CRS, nearest'}[ds],
            med[ds]['mb_per_s'], med[ds]['cpu_s_per_gb'], med[ds]['daemon_cpu_s_per_gb']))
    print('stac / scenes CPU per byte: %.2fx (target <= 1.1: %s); per run: %s' % (
        ratio, 'PASS' if ratio <= 1.1 else 'MISS',
        ', '.join('%.2f' % (a['cpu_s_per_gb'] / b['cpu_s_per_gb']) for a, b in zip(runs['stac'], runs['scenes']))))
    return dict(runs=runs, median=med, ratio=ratio)


def part_c(args, items, tiff):
    extra = ['--max-batches', str(args.batches), '--seed', '7']
    res = []
    for run in range(args.runs):
        row = {}
        for k in (1, 4):
            d = Daemon(args.work, items, tiff)
            try:
                s0 = d.metric('cogfeed_store_bytes_total')
                outs = [None] * k

                def go(i):
                    outs[i] = d.bench('stac', 600, job='job%d' % i, extra=extra)
                th = [threading.Thread(target=go, args=(i,)) for i in range(k)]
                for t in th:
                    t.start()
                for t in th:
                    t.join()
                row[k] = dict(store_bytes=d.metric('cogfeed_store_bytes_total') - s0,
                              delivered=sum(o['bytes'] for o in outs if o))
            finally:
                d.stop()
        row['ratio'] = row[4]['store_bytes'] / row[1]['store_bytes']
        log('C run %d: 1 job %d store bytes, 4 jobs %d: %.3fx' % (run + 1, row[1]['store_bytes'],
                                                                   row[4]['store_bytes'], row['ratio']))
        res.append(row)
    m1 = statistics.median(r[1]['store_bytes'] for r in res)
    m4 = statistics.median(r[4]['store_bytes'] for r in res)
    ratio = statistics.median(r['ratio'] for r in res)
    print('\nC. Store bytes, STAC dataset (b04 native nearest), %d batches of 16 x 128 px per job, same seed, '
          'fresh daemon each (median of %d)' % (args.batches, args.runs))
    print('| jobs | store bytes | delivered bytes |')
    print('|---|---:|---:|')
    print('| 1 | %d | %d |' % (m1, res[0][1]['delivered']))
    print('| 4 concurrent | %d | %d |' % (m4, res[0][4]['delivered']))
    print('k=4 / k=1 store bytes: %.3fx (target <= 1.05: %s)' % (ratio, 'PASS' if ratio <= 1.05 else 'MISS'))
    return dict(runs=res, ratio=ratio)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--parts', default='A,B,C')
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--cases', type=int, default=40, help='footprints per group (A)')
    ap.add_argument('--min-secs', type=float, default=1.5, help='timed seconds per group and contender (A)')
    ap.add_argument('--duration', type=float, default=8, help='seconds per client bench (B)')
    ap.add_argument('--batches', type=int, default=40, help='batches per job (C)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--work', default='/tmp/cogfeed-warp-bench')
    ap.add_argument('--json', help='write every figure here')
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    items = subprocess.run([binary('examples', 'warp_bench'), '--write-demo', os.path.join(args.work, 'stac')],
                           check=True, capture_output=True, text=True).stdout.strip()
    tiff = os.path.join(os.path.dirname(items), 'tiff')
    parts = set(p.strip().upper() for p in args.parts.split(','))
    out = {}
    if 'A' in parts:
        out['A'] = part_a(args, items)
    if 'B' in parts:
        out['B'] = part_b(args, items, tiff)
    if 'C' in parts:
        out['C'] = part_c(args, items, tiff)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1)


if __name__ == '__main__':
    main()
