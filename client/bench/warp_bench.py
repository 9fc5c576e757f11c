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
B  CPU (daemon + client, from /proc) per delivered GB: a STAC dataset with one native-CRS nearest layer
   (B04, 10 m) against a scene dataset of the same B04 files (pixel space), one daemon, cogfeed-client
   bench --sampler random --patch-size 128 --batch-size 16 --duration D, warm cache (one untimed bench of
   each first), datasets alternating. Two pairs: both tiles (the STAC samples near the seam mosaic the
   neighbour Item, reprojected across the zone boundary) and the 32TQS tile alone (items_32.json: the
   per-sample path without a mosaic). Target stac/scenes <= 1.1.
C  cogfeed_store_bytes_total of k = 4 concurrent jobs (different job names) against one job, each on a
   fresh daemon, over the STAC dataset, --batches batches per job: the same request, and different
   seeds. Target <= 1.05.
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


def wait_idle(limit=900):
    """Waits (up to `limit` s) until no cargo or rustc runs on the machine: a build on one of two cores
    would distort any CPU or throughput figure."""
    t0, said = time.time(), False
    while time.time() - t0 < limit:
        busy = any(subprocess.run(['pgrep', '-x', n], capture_output=True).returncode == 0 for n in ('cargo', 'rustc'))
        if not busy:
            if said:
                log('... idle after %.0f s' % (time.time() - t0))
            return
        if not said:
            log('waiting for cargo/rustc to finish ...')
            said = True
        time.sleep(3)
    log('warning: cargo/rustc still running after %d s; measuring anyway' % limit)


class BuildWatch:
    """Polls for cargo/rustc while a measurement runs: `with BuildWatch() as w: ...; w.seen`."""

    def __enter__(self):
        self.seen, self._stop = False, threading.Event()

        def poll():
            while not self._stop.wait(0.5):
                if any(subprocess.run(['pgrep', '-x', n], capture_output=True).returncode == 0
                       for n in ('cargo', 'rustc')):
                    self.seen = True
        self._t = threading.Thread(target=poll, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def measured(fn, what, tries=5):
    """fn() with no build running before or during it (retried up to `tries` times)."""
    for _ in range(tries):
        wait_idle()
        with BuildWatch() as w:
            out = fn()
        if not w.seen:
            return out
        log('%s: a build ran meanwhile; measuring again' % what)
    log('warning: %s: a build ran during every try; keeping the last' % what)
    return out


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
        half, spread = FP * 5, max(200, 3200 - FP * 10)
        case('mode', [LC], 'classes', 32632, cx - half + (rnd.random() - 0.5) * spread,
             cy + half + (rnd.random() - 0.5) * spread, 10, 'mode', 255)
    # The 32632 tile seen from zone 33: footprints whose four corners fall in its valid part.
    t33to32 = transformer(32633, 32632)
    t32to33 = transformer(32632, 32633)
    for kernel in ('bilinear', 'nearest'):
        k = 0
        while k < n:
            px, py = in32(10)
            half = FP * 5
            x, y, _ = t32to33.TransformPoint(px + half, py - half)
            x, y = x - half, y + half
            if all(inside_tile(t33to32, T32, x + dx, y - dy, 60) for dx in (0, 2 * half) for dy in (0, 2 * half)):
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
        y = uy - 300 - rnd.random() * (TILE_M - FP * 10 - 600)
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
    cmd = [binary('examples', 'warp_bench'), cases_path, '--min-secs', str(min_secs), '--concurrency', '1,16']
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
        g, outs = measured(lambda: gb.run(cases, args.min_secs), 'A GDAL run %d' % (run + 1))
        gdal_runs.append(g)
        gdal_out = gdal_out or outs
        blob = os.path.join(args.work, 'warp_out.bin') if run == 0 else None
        r = measured(lambda: rust_bench(cases_path, args.min_secs, blob), 'A cogfeed run %d' % (run + 1))
        rust_runs.append(r['per_concurrency'])
        if run == 0:
            check = compare(cases, gdal_out, r, blob)
        log('A run %d (cogfeed serial / GDAL): %s' % (run + 1, ', '.join(
            '%s %.2fx' % (k, r['per_concurrency']['1'][k]['samples_per_cpu_s'] / g[k]['samples_per_cpu_s'])
            for k in g)))
    rows = {}
    for grp in gdal_runs[0]:
        gs = statistics.median(x[grp]['samples_per_cpu_s'] for x in gdal_runs)
        r1 = statistics.median(x['1'][grp]['samples_per_cpu_s'] for x in rust_runs)
        r16 = statistics.median(x['16'][grp]['samples_per_cpu_s'] for x in rust_runs)
        rows[grp] = dict(gdal_msamples_per_cpu_s=gs / 1e6, cogfeed_msamples_per_cpu_s=r1 / 1e6,
                         cogfeed16_msamples_per_cpu_s=r16 / 1e6, ratio=r1 / gs, ratio16=r16 / gs,
                         ratios=[r['1'][grp]['samples_per_cpu_s'] / g[grp]['samples_per_cpu_s']
                                 for g, r in zip(gdal_runs, rust_runs)],
                         agree='%d/%d' % (check[grp]['ok'], check[grp]['cases']),
                         worst_frac=check[grp]['worst_frac'], worst_max_abs=check[grp]['worst_max_abs'])
    print('\nA. Warped samples per CPU-second, one thread (%dx%d px footprints, %d per group; median of %d)'
          % (FP, FP, args.cases, args.runs))
    print('cogfeed serial: one footprint at a time, as GDAL; cogfeed x16: 16 footprints in flight (a batch), '
          'still one rayon worker')
    print('| case | GDAL 3.6 Msamples/s/core | cogfeed serial | cogfeed x16 | serial / GDAL | x16 / GDAL '
          '| target >= 2x | outputs agree with GDAL |')
    print('|---|---:|---:|---:|---:|---:|---|---|')
    for grp, r in rows.items():
        print('| %s | %.2f | %.2f | %.2f | %.2fx | %.2fx | %s | %s (worst case: %.2f%% within tolerance, max |d| %g) |'
              % (grp, r['gdal_msamples_per_cpu_s'], r['cogfeed_msamples_per_cpu_s'], r['cogfeed16_msamples_per_cpu_s'],
                 r['ratio'], r['ratio16'], 'PASS' if r['ratio'] >= 2 else 'MISS', r['agree'], 100 * r['worst_frac'],
                 r['worst_max_abs']))
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
        # The same, one tile only (no seam, so no cross-zone mosaic): items_32.json holds the 32TQS Item.
        with open(items) as f:
            doc = json.load(f)
        doc['features'] = [ft for ft in doc['features'] if ft['id'] == T32]
        items1 = os.path.join(os.path.dirname(items), 'items_32.json')
        with open(items1, 'w') as f:
            json.dump(doc, f)
        layer = ('[[datasets.layers]]\nname = "b04"\nassets = ["B04"]\nresolution = 10.0\n'
                 'resampling = "nearest"\n\n')
        with open(cfg, 'w') as f:
            f.write('[cache]\ncapacity_bytes = 1073741824\n\n[limits]\nrequests_per_second = 100000\n\n')
            f.write('[[datasets]]\nname = "scenes"\nscenes = %s\n\n' % json.dumps(scenes))
            f.write('[[datasets]]\nname = "stac"\nstac = %s\ncrs = "native"\n%s' % (json.dumps(items), layer))
            f.write('[[datasets]]\nname = "scenes1"\nscenes = %s\n\n' % json.dumps(scenes[:1]))
            f.write('[[datasets]]\nname = "stac1"\nstac = %s\ncrs = "native"\n%s' % (json.dumps(items1), layer))
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

    def bench(self, dataset, duration, job='cli', samples_per_epoch=10000000, extra=()):
        cmd = [binary('cogfeed-client'), '--server', '127.0.0.1:%d' % self.port, 'bench', '--dataset', dataset,
               '--sampler', 'random', '--patch-size', '128', '--batch-size', '16', '--duration', str(duration),
               '--job', job, '--samples-per-epoch', str(samples_per_epoch)] + list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError('cogfeed-client failed: %s' % r.stderr.strip()[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


NAMES = {'scenes': 'scenes: both B04 files (pixel space)', 'stac': 'STAC: both Items, native CRS, nearest',
         'scenes1': 'scenes: the 32TQS B04 file only', 'stac1': 'STAC: the 32TQS Item only, native CRS, nearest'}
PAIRS = (('stac', 'scenes'), ('stac1', 'scenes1'))


def part_b(args, items, tiff):
    d = Daemon(args.work, items, tiff)
    order = ['scenes', 'stac', 'scenes1', 'stac1']
    runs = {ds: [] for ds in order}
    try:
        for ds in order:   # warm the cache and every path
            d.bench(ds, 2)
        for run in range(args.runs):
            for ds in order if run % 2 == 0 else order[::-1]:
                def one():
                    c0 = d.cpu()
                    r = d.bench(ds, args.duration)
                    return r, d.cpu() - c0
                r, daemon_cpu = measured(one, 'B run %d %s' % (run + 1, ds))
                gb = r['bytes'] / 1e9
                client_cpu = r['client_cpu_s_per_gb'] * gb
                runs[ds].append(dict(mb_per_s=r['mb_per_s'], bytes=r['bytes'], daemon_cpu_s=daemon_cpu,
                                     client_cpu_s=client_cpu, cpu_s_per_gb=(daemon_cpu + client_cpu) / gb,
                                     daemon_cpu_s_per_gb=daemon_cpu / gb))
                log('B run %d %s: %.0f MB/s, %.2f CPU-s/GB (daemon %.2f)' % (
                    run + 1, ds, r['mb_per_s'], runs[ds][-1]['cpu_s_per_gb'], runs[ds][-1]['daemon_cpu_s_per_gb']))
    finally:
        d.stop()
    med = {ds: {k: statistics.median(x[k] for x in v) for k in ('mb_per_s', 'cpu_s_per_gb', 'daemon_cpu_s_per_gb')}
           for ds, v in runs.items()}
    ratios = {a: med[a]['cpu_s_per_gb'] / med[b]['cpu_s_per_gb'] for a, b in PAIRS}
    print('\nB. CPU per delivered GB, B04 uint16, random 128 px patches, batch 16, warm cache, %g s each (median of %d)'
          % (args.duration, args.runs))
    print('| dataset | MB/s | CPU-s/GB (daemon + client) | daemon CPU-s/GB |')
    print('|---|---:|---:|---:|')
    for ds in order:
        print('| %s | %.0f | %.2f | %.2f |' % (NAMES[ds], med[ds]['mb_per_s'], med[ds]['cpu_s_per_gb'],
                                              med[ds]['daemon_cpu_s_per_gb']))
    for a, b in PAIRS:
        print('%s / %s CPU per byte: %.2fx (target <= 1.1: %s); per run: %s' % (
            a, b, ratios[a], 'PASS' if ratios[a] <= 1.1 else 'MISS',
            ', '.join('%.2f' % (x['cpu_s_per_gb'] / y['cpu_s_per_gb']) for x, y in zip(runs[a], runs[b]))))
    return dict(runs=runs, median=med, ratios=ratios)


def part_c(args, items, tiff):
    variants = (('same', 'the same request (seed 7), different job names'),
                ('seeds', 'different seeds (job i: seed i), different job names'))
    res = {v: [] for v, _ in variants}
    for run in range(args.runs):
        for v, _ in variants:
            row = {}
            for k in (1, 4):
                wait_idle()
                d = Daemon(args.work, items, tiff)
                try:
                    s0 = d.metric('cogfeed_store_bytes_total')
                    outs = [None] * k

                    def go(i):
                        seed = 7 if v == 'same' else i
                        try:
                            outs[i] = d.bench('stac', 600, job='job%d' % i, samples_per_epoch=16 * args.batches,
                                              extra=['--max-batches', str(args.batches), '--seed', str(seed)])
                        except Exception as ex:
                            outs[i] = ex
                    th = [threading.Thread(target=go, args=(i,)) for i in range(k)]
                    for t in th:
                        t.start()
                    for t in th:
                        t.join()
                    for o in outs:
                        if isinstance(o, Exception):
                            raise o
                    row[k] = dict(store_bytes=d.metric('cogfeed_store_bytes_total') - s0,
                                  delivered=sum(o['bytes'] for o in outs))
                finally:
                    d.stop()
            row['ratio'] = row[4]['store_bytes'] / row[1]['store_bytes']
            log('C run %d %s: 1 job %d store bytes, 4 jobs %d: %.3fx' % (
                run + 1, v, row[1]['store_bytes'], row[4]['store_bytes'], row['ratio']))
            res[v].append(row)
    print('\nC. Store bytes (cogfeed_store_bytes_total after start-up), STAC dataset (b04, native, nearest), '
          '%d batches of 16 x 128 px per job, fresh daemon per measurement (median of %d)' % (args.batches, args.runs))
    print('| jobs | store bytes, k = 1 | store bytes, k = 4 | delivered, k = 4 | k=4 / k=1 | target <= 1.05 |')
    print('|---|---:|---:|---:|---:|---|')
    out = {}
    for v, name in variants:
        rows = res[v]
        m1 = statistics.median(r[1]['store_bytes'] for r in rows)
        m4 = statistics.median(r[4]['store_bytes'] for r in rows)
        ratio = statistics.median(r['ratio'] for r in rows)
        print('| %s | %d | %d | %d | %.3fx | %s |' % (name, m1, m4, rows[0][4]['delivered'], ratio,
                                                     'PASS' if ratio <= 1.05 else 'MISS'))
        out[v] = dict(runs=rows, ratio=ratio)
    return out


def main():
    global FP
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--parts', default='A,B,C')
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--cases', type=int, default=40, help='footprints per group (A)')
    ap.add_argument('--min-secs', type=float, default=1.5, help='timed seconds per group and contender (A)')
    ap.add_argument('--duration', type=float, default=8, help='seconds per client bench (B)')
    ap.add_argument('--batches', type=int, default=10, help='batches per job (C)')
    ap.add_argument('--size', type=int, default=FP, help='footprint width and height in px (A)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--work', default='/tmp/cogfeed-warp-bench')
    ap.add_argument('--json', help='write every figure here')
    args = ap.parse_args()
    FP = args.size
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
