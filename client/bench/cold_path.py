#!/usr/bin/env python3
"""The cold path against the decode limit: what a cold batch costs beside what GDAL spends decoding it.

Owns one measurement (issue 17, item 1), per codec, in one run on the same files:

- **GDAL decode**: GDAL's single-threaded `ReadRaster` of every full-resolution 512 px tile
  of the files (all bands), from the local file system (page cache), in a Debian
  `/usr/bin/python3` with `osgeo`. CPU-s per GB decoded (process CPU time).
- **cogfeed cold, steady state**: what every epoch costs when the working set fits no
  cache. A daemon with a 256 MiB tile cache (`--steady-cache-mb`) first streams an epoch of
  another dataset (the same scenes in another codec: same tile size), so its cache is full
  and evicting; then it reads the measured files from nginx on loopback (Range GETs, no
  delay proxy) and streams one aligned epoch (512 px, batch 16, native dtype, every tile
  once, every tile a miss) to `cogfeed-client bench`. CPU-s per GB delivered: daemon +
  client.
- **cogfeed cold, cache filling**: the same epoch on a fresh daemon with the default 2 GiB
  cache (its first epoch after start-up: every tile is a miss in fresh memory, whose first
  touch the kernel zeroes; in a VM that is the host's page faults too).
- **cogfeed warm**: that epoch again on the same daemon (every tile cached).

Target: steady-state cold <= 1.0 x (GDAL decode + cogfeed warm), i.e. a cold batch served end
to end costs no more than GDAL spends only decoding it, plus delivery. nginx's CPU is
reported apart.

`--perf DIR` records the daemon during each steady-state cold epoch (`perf record -g`) and writes
`DIR/CODEC.perf.txt` (`perf report`, self time) and `DIR/CODEC.folded` (stacks folded for a
flame graph; `inferno-flamegraph < CODEC.folded > CODEC.svg` renders one when installed).

    python3 client/bench/cold_path.py [--codecs deflate,zstd,lzw,lerc_zstd,none] [--scenes 8]
        [--reps 3] [--perf DIR] [--out cold.json]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gen_data  # noqa: E402
import services as svc  # noqa: E402

GDAL_PY = "/usr/bin/python3"
GDAL_DECODE = r"""
import sys, time
from osgeo import gdal
gdal.SetCacheMax(64 << 20)
gdal.SetConfigOption("GDAL_NUM_THREADS", "1")
total = 0
t = time.process_time()
for path in sys.argv[1:]:
    ds = gdal.Open(path)
    bx, by = ds.GetRasterBand(1).GetBlockSize()
    for y in range(0, ds.RasterYSize, by):
        for x in range(0, ds.RasterXSize, bx):
            w, h = min(bx, ds.RasterXSize - x), min(by, ds.RasterYSize - y)
            total += len(ds.ReadRaster(x, y, w, h))
    ds = None
print(time.process_time() - t, total)
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def gdal_decode(files):
    """(CPU-s per GB decoded, bytes) of GDAL reading every tile of `files` once."""
    # Warm the page cache first so that both contenders read from memory.
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    out = subprocess.run([GDAL_PY, "-c", GDAL_DECODE, *map(str, files)], capture_output=True, text=True,
                         check=True, env=dict(os.environ, GDAL_NUM_THREADS="1"))
    cpu, total = out.stdout.split()
    return float(cpu) / (int(total) / 1e9), int(total)


def bench_cmd(d, batches, dataset="bench"):
    return [svc.binary("cogfeed-client"), "--server", d.address, "bench", "--dataset", dataset,
            "--sampler", "aligned", "--patch-size", "512", "--batch-size", "16", "--seed", "0",
            "--max-batches", str(batches), "--duration", "600", "--dtype", "native"]


def epoch(d, batches, nginx, perf_to=None, dataset="bench"):
    """One aligned epoch; CPU figures of daemon, client and nginx, and MB/s."""
    cpu0, ng0 = d.cpu(), sum(svc.cpu_seconds(p) for p in nginx.pids())
    rec = None
    if perf_to:
        rec = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(d.proc.pid), "-o", str(perf_to)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    t = time.perf_counter()
    p = subprocess.run(bench_cmd(d, batches, dataset), capture_output=True, text=True)
    wall = time.perf_counter() - t
    if rec:
        rec.send_signal(2)
        rec.wait(60)
    if p.returncode != 0:
        raise RuntimeError(f"cogfeed-client failed: {p.stderr.strip()[-500:]}")
    o = json.loads(p.stdout.strip().splitlines()[-1])
    gb = o["bytes"] / 1e9
    daemon = d.cpu() - cpu0
    client = o["client_cpu_s_per_gb"] * gb
    return {"bytes": o["bytes"], "wall_s": wall, "mb_per_s": o["bytes"] / o["seconds"] / 1e6,
            "daemon_cpu_s": daemon, "client_cpu_s": client,
            "cpu_s_per_gb": (daemon + client) / gb, "daemon_cpu_s_per_gb": daemon / gb,
            "nginx_cpu_s_per_gb": (sum(svc.cpu_seconds(p) for p in nginx.pids()) - ng0) / gb}


def perf_report(data, stem):
    """Self-time report and folded stacks of one recording."""
    rep = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio", "--percent-limit", "0.7",
                          "--sort", "dso,symbol", "-g", "none"], capture_output=True, text=True)
    Path(f"{stem}.perf.txt").write_text(rep.stdout)
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, text=True)
    folded, stack, comm = {}, [], None
    for line in script.stdout.splitlines() + [""]:
        if not line.strip():
            if comm is not None and stack:
                key = ";".join([comm] + stack[::-1])
                folded[key] = folded.get(key, 0) + 1
            stack, comm = [], None
        elif not line.startswith((" ", "\t")):
            comm = line.split()[0]
        else:
            parts = line.strip().split(None, 1)
            sym = parts[1].rsplit(" (", 1)[0] if len(parts) > 1 else "?"
            stack.append(sym.split("+0x")[0])
    Path(f"{stem}.folded").write_text("".join(f"{k} {v}\n" for k, v in sorted(folded.items())))
    if shutil.which("inferno-flamegraph"):
        with open(f"{stem}.folded") as i, open(f"{stem}.svg", "w") as o:
            subprocess.run(["inferno-flamegraph"], stdin=i, stdout=o)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--codecs", default="deflate,zstd,lzw,lerc_zstd,none")
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=os.environ.get("COGFEED_BENCH_DATA", gen_data.DEFAULT_ROOT))
    ap.add_argument("--steady-cache-mb", type=int, default=256,
                    help="tile cache of the steady-state daemon (full of another dataset's tiles first)")
    ap.add_argument("--perf", help="folder for perf reports and folded stacks of the cold epochs")
    ap.add_argument("--out", help="JSON with every raw figure")
    a = ap.parse_args()
    codecs = a.codecs.split(",")
    work = Path(tempfile.mkdtemp(prefix="cogfeed-cold-"))
    if a.perf:
        Path(a.perf).mkdir(parents=True, exist_ok=True)
    files = subprocess.run([GDAL_PY, str(HERE / "gen_data.py"), "--root", a.data, "--scenes", str(a.scenes),
                            "--size", str(a.size), "--compressions", ",".join(codecs)], check=True,
                           capture_output=True, text=True)
    log(files.stdout.strip())
    nginx = svc.Nginx(Path(a.data) / f"{a.size}px", work / "nginx").start()
    batches = a.scenes * (a.size // 512) ** 2 // 16
    results = {"commit": subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip(),
               "scenes": a.scenes, "size": a.size, "codecs": {}}
    try:
        for codec in codecs:
            paths = [Path(a.data) / f"{a.size}px" / codec / f"scene_{i:02d}.tif" for i in range(a.scenes)]
            urls = [f"http://127.0.0.1:{nginx.port}/{codec}/{p.name}" for p in paths]
            runs = []
            # The steady state of a working set larger than any cache: a small cache already
            # full of another dataset's tiles (same tile size), so every tile of the measured
            # epoch is a miss and its memory is an evicted tile's, as at petabyte scale.
            other = "none" if codec != "none" else "deflate"
            prime = [f"http://127.0.0.1:{nginx.port}/{other}/scene_{i:02d}.tif" for i in range(a.scenes)]
            for rep in range(a.reps):
                g, _ = gdal_decode(paths)
                d = svc.Daemon(work / f"s-{codec}-{rep}", {"bench": urls, "prime": prime},
                               capacity_bytes=a.steady_cache_mb << 20).start()
                try:
                    epoch(d, batches, nginx, dataset="prime")
                    perf_to = Path(a.perf) / f"{codec}.perf.data" if a.perf and rep == 0 else None
                    steady = epoch(d, batches, nginx, perf_to)
                finally:
                    d.stop()
                if perf_to:
                    perf_report(perf_to, Path(a.perf) / codec)
                    perf_to.unlink(missing_ok=True)
                d = svc.Daemon(work / f"d-{codec}-{rep}", {"bench": urls}).start()
                try:
                    cold = epoch(d, batches, nginx)
                    warm = epoch(d, batches, nginx)
                finally:
                    d.stop()
                ratio = steady["cpu_s_per_gb"] / (g + warm["cpu_s_per_gb"])
                runs.append({"gdal_decode_cpu_s_per_gb": g, "steady": steady, "cold": cold, "warm": warm,
                             "ratio": ratio})
                log(f"{codec} rep {rep}: GDAL decode {g:.2f} CPU-s/GB; cogfeed cold steady {steady['cpu_s_per_gb']:.2f} "
                    f"(daemon {steady['daemon_cpu_s_per_gb']:.2f}, {steady['mb_per_s']:.0f} MB/s), cold filling "
                    f"{cold['cpu_s_per_gb']:.2f} ({cold['mb_per_s']:.0f} MB/s), warm {warm['cpu_s_per_gb']:.2f} "
                    f"({warm['mb_per_s']:.0f} MB/s); nginx {steady['nginx_cpu_s_per_gb']:.2f}; "
                    f"steady / (GDAL + warm) = {ratio:.2f}")
            med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
            results["codecs"][codec] = {
                "runs": runs,
                "median": {"gdal": med(lambda r: r["gdal_decode_cpu_s_per_gb"]),
                           "steady": med(lambda r: r["steady"]["cpu_s_per_gb"]),
                           "steady_daemon": med(lambda r: r["steady"]["daemon_cpu_s_per_gb"]),
                           "steady_mb_s": med(lambda r: r["steady"]["mb_per_s"]),
                           "cold": med(lambda r: r["cold"]["cpu_s_per_gb"]),
                           "warm": med(lambda r: r["warm"]["cpu_s_per_gb"]),
                           "cold_mb_s": med(lambda r: r["cold"]["mb_per_s"]),
                           "warm_mb_s": med(lambda r: r["warm"]["mb_per_s"]),
                           "nginx": med(lambda r: r["steady"]["nginx_cpu_s_per_gb"]),
                           "ratio": med(lambda r: r["ratio"])}}
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ncommit {results['commit']}, {a.scenes} scenes of {a.size}² x 4 uint16, aligned 512 px epochs, "
          f"medians of {a.reps}; CPU-s per GB delivered (GDAL: per GB decoded)\n")
    print("| codec | GDAL decode | cogfeed warm | cogfeed cold, steady state (daemon) | steady / (GDAL + warm) | target "
          "| cold, cache filling | MB/s steady / filling / warm | nginx |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for codec, r in results["codecs"].items():
        m = r["median"]
        verdict = "PASS" if m["ratio"] <= 1.0 else "MISS"
        print(f"| {codec} | {m['gdal']:.2f} | {m['warm']:.2f} | {m['steady']:.2f} ({m['steady_daemon']:.2f}) | "
              f"{m['ratio']:.2f} | <= 1.0 {verdict} | {m['cold']:.2f} | {m['steady_mb_s']:.0f} / {m['cold_mb_s']:.0f} / "
              f"{m['warm_mb_s']:.0f} | {m['nginx']:.2f} |")
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
