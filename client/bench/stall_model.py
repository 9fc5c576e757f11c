#!/usr/bin/env python3
"""The stall model: how many training ranks one daemon core keeps fed.

    python3 client/bench/stall_model.py [--ranks 1,2,4,8,16] [--steps-ms 50,200] [--duration 20]
        [--daemon-cores 1] [--cache-mb 64] [--out stall.json]

Owns one measurement and its table. It starts one `cogfeed serve` pinned to
`--daemon-cores` cores (sched_setaffinity) over demo scenes written once
(`cogfeed demo-data`, 8 scenes of 2048 px, 4-band uint16), with a tile cache smaller than
the data (`--cache-mb`), so most tiles are decoded again: the daemon's CPU, not the page
cache, is what is measured. Then, for every N in `--ranks` and every step time, N simulated
ranks run at once on the other cores: `cogfeed-client bench --rank r --world-size N
--step-ms S`: its loop takes a batch, "computes" for S ms (sleeps: a GPU step leaves the CPU
free) and takes the next, while a reader task keeps up to 2 batches received ahead (as a
PyTorch DataLoader prefetches). A rank's stall fraction is the time it waited for data ÷ its
wall time after its first batch. The table gives, per (N, step), the median and worst rank,
the aggregate MB/s and the daemon's CPU-seconds per GB; then, per step time, the largest
measured N with every rank under 5 % stall, per daemon core.

Lines marked "extrapolated" (daemon replicas for 64 and 512 GPUs at one rank per GPU) are
arithmetic on the measured per-core figure, not measurements.
"""

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STALL_LIMIT = 0.05


def binary(name):
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    path = Path(target) / "release" / name
    if not path.exists():
        sys.exit(f"{path} not built: cargo build --release --bins")
    return str(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` (and its reaped children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def split_cores(daemon_cores):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= daemon_cores:
        return cores, cores  # one machine core: share it (the table says so)
    return cores[:daemon_cores], cores[daemon_cores:]


def start_daemon(data, cache_mb, cores, port, metrics_port):
    scenes = sorted(str(p) for p in Path(data).glob("scene_*.tif"))
    config = Path(data) / "stall.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\nmetrics_listen = "127.0.0.1:{metrics_port}"\n'
        f"[cache]\ncapacity_bytes = {cache_mb << 20}\n"
        f'[[datasets]]\nname = "stall"\nscenes = {json.dumps(scenes)}\n'
    )
    proc = subprocess.Popen([binary("cogfeed"), "serve", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, cores))
    for line in proc.stderr:
        if "grpc listening on" in line:
            break
    else:
        sys.exit(f"daemon exited with {proc.wait()}")
    # Keep draining its log so it never blocks on a full pipe.
    subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
    return proc


def run_ranks(address, n, step_ms, args, cores, seed):
    procs = []
    for r in range(n):
        cmd = [binary("cogfeed-client"), "--server", address, "bench", "--dataset", "stall",
               "--sampler", "random", "--patch-size", str(args.patch), "--batch-size", str(args.batch),
               "--samples-per-epoch", "1000000", "--seed", str(seed), "--rank", str(r), "--world-size", str(n),
               "--job", f"rank-{r}", "--duration", str(args.duration), "--step-ms", str(step_ms),
               "--prefetch", str(args.prefetch)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      preexec_fn=lambda: os.sched_setaffinity(0, cores)))
    reports = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"a rank failed with {p.returncode}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1,2,4,8,16")
    ap.add_argument("--steps-ms", default="50,200")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--daemon-cores", type=int, default=1)
    ap.add_argument("--cache-mb", type=int, default=64)
    ap.add_argument("--patch", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prefetch", type=int, default=0, help="the daemon's look-ahead per stream (0: automatic)")
    ap.add_argument("--data", help="demo scenes folder (default: a temporary one, written once)")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    steps = [float(x) for x in args.steps_ms.split(",")]
    data = args.data or os.path.join(tempfile.gettempdir(), "cogfeed-stall-data")
    if not list(Path(data).glob("scene_*.tif")):
        subprocess.run([binary("cogfeed"), "demo-data", data, "--scenes", "8", "--size", "2048"], check=True,
                       stdout=subprocess.DEVNULL)
    daemon_cores, rank_cores = split_cores(args.daemon_cores)
    port, metrics_port = free_port(), free_port()
    daemon = start_daemon(data, args.cache_mb, daemon_cores, port, metrics_port)
    address = f"127.0.0.1:{port}"
    rows = []
    try:
        for step in steps:
            for n in ranks:
                cpu0 = cpu_seconds(daemon.pid)
                reports = run_ranks(address, n, step, args, rank_cores, seed=len(rows))
                cpu = cpu_seconds(daemon.pid) - cpu0
                stalls = sorted(r["stall_fraction"] for r in reports)
                gb = sum(r["bytes"] for r in reports) / 1e9
                rows.append({
                    "ranks": n, "step_ms": step,
                    "stall_median": statistics.median(stalls), "stall_worst": stalls[-1],
                    "mb_per_s": sum(r["mb_per_s"] for r in reports),
                    "needed_mb_per_s": n * args.batch * 4 * args.patch ** 2 * 2 / (step / 1e3) / 1e6,
                    "daemon_cpu_s_per_gb": cpu / gb if gb else None,
                })
                r = rows[-1]
                print(f"N={n:3d} step={step:5.0f} ms  stall median {r['stall_median']:6.1%} worst "
                      f"{r['stall_worst']:6.1%}  {r['mb_per_s']:7.0f} MB/s (needed {r['needed_mb_per_s']:6.0f})  "
                      f"daemon {r['daemon_cpu_s_per_gb'] or 0:.2f} CPU-s/GB", flush=True)
    finally:
        daemon.terminate()
        daemon.wait()
    shared = daemon_cores == rank_cores
    print(f"\nmeasured: daemon on {len(daemon_cores)} core(s){' shared with the ranks' if shared else ''}, "
          f"ranks on {len(rank_cores)}; {args.patch} px x {args.batch} x 4 bands uint16, "
          f"cache {args.cache_mb} MiB under 256 MiB of data; look-ahead "
          f"{args.prefetch or 'automatic'}")
    summary = {}
    for step in steps:
        ok = [r["ranks"] for r in rows if r["step_ms"] == step and r["stall_worst"] < STALL_LIMIT]
        best = max(ok, default=0)
        per_core = best / len(daemon_cores)
        summary[step] = per_core
        print(f"measured: step {step:.0f} ms: largest N with every rank under 5 % stall = {best} "
              f"({per_core:g} ranks per daemon core)")
        for gpus in (64, 512):
            if per_core:
                cores = math.ceil(gpus / per_core)
                print(f"  extrapolated: {gpus} GPUs at {step:.0f} ms steps need {cores} daemon cores "
                      f"(e.g. {math.ceil(cores / 16)} replicas of 16 cores)")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "ranks_per_core": summary}, indent=1))


if __name__ == "__main__":
    main()
