#!/usr/bin/env python3
"""Receive throughput into numpy vs the Rust client, same daemon, same request, same run.

    python3 client/python/bench.py --server 127.0.0.1:50051 --dataset demo [--batches 200]

Prints MB/s for both (median of --repeats runs each, alternating) and the ratio.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import cogfeed


def rust_client():
    for d in (os.environ.get("COGFEED_BIN_DIR"), os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release")):
        if d and os.path.exists(os.path.join(d, "cogfeed-client")):
            return os.path.join(d, "cogfeed-client")
    raise SystemExit("build cogfeed-client first: cargo build --release")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--dataset", default="demo")
    ap.add_argument("--sampler", default="random")
    ap.add_argument("--patch-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--dtype", default="native")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    samples = a.batches * a.batch_size
    rust_args = [rust_client(), "--server", a.server, "bench", "--dataset", a.dataset, "--sampler", a.sampler,
                 "--patch-size", str(a.patch_size), "--batch-size", str(a.batch_size), "--max-batches",
                 str(a.batches), "--samples-per-epoch", str(samples), "--dtype", a.dtype, "--duration", "600"]
    rust, py = [], []
    for r in range(a.repeats):
        out = subprocess.run(rust_args, check=True, capture_output=True, text=True).stdout
        rust.append(json.loads(out)["mb_per_s"])
        loader = cogfeed.Loader(a.server, a.dataset, sampler=a.sampler, patch_size=a.patch_size,
                                batch_size=a.batch_size, samples_per_epoch=samples, max_batches=a.batches,
                                dtype=a.dtype)
        t = time.perf_counter()
        nbytes = 0
        cpu = time.process_time()
        for b in loader:
            nbytes += b.image.nbytes
        secs = time.perf_counter() - t
        py.append(nbytes / secs / 1e6)
        cpu_per_gb = (time.process_time() - cpu) / (nbytes / 1e9)
    r, p = statistics.median(rust), statistics.median(py)
    print(json.dumps({"rust_mb_per_s": round(r), "python_mb_per_s": round(p), "ratio": round(p / r, 2),
                      "python_cpu_s_per_gb": round(cpu_per_gb, 2), "runs": a.repeats}))


if __name__ == "__main__":
    main()
