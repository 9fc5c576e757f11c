#!/usr/bin/env python3
"""Warm delivery against the transport's own limit, and Python against Rust, in one run.

Owns issue 17's item 3. On one machine, alternating, medians of `--reps`:

- **daemon, Rust**: `cogfeed-client bench` against a daemon whose tiles are all cached
  (32 demo scenes of 2048² x 4 uint16, 256 px tiles, 1 GiB decoded, warmed by one aligned
  epoch), 256 px windows, batch 32, native uint16 (16 MiB per batch);
- **bare tonic, Rust**: the same client against `cogfeed serve-synthetic`, which streams one
  prebuilt batch of the same shape again and again through the daemon's transport settings
  and codec: what tonic, HTTP/2 and the kernel carry here, with no pipeline at all;
- **daemon, Python**: `cogfeed.Loader` (numpy over the received bytes), and
  `cogfeed.torch.StreamDataset` (tensors over the same bytes, no copy), same request.

Rates are bytes after the first batch over the time after it. Targets: daemon >= 1.5 GB/s
to one Rust client, daemon >= 0.8 x bare tonic, Python >= 0.85 x Rust.

    python3 client/bench/warm_bench.py [--reps 3] [--batches 256] [--sampler aligned,random] [--out warm.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))
import services as svc  # noqa: E402

SCENES, SIZE, PATCH, BATCH, BANDS = 32, 2048, 256, 32, 4


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def data(root):
    root = Path(root)
    if len(list(root.glob("*.tif"))) < SCENES:
        subprocess.run([svc.binary("cogfeed"), "demo-data", str(root), "--scenes", str(SCENES), "--size", str(SIZE)],
                       check=True, capture_output=True)
    return sorted(p for p in root.glob("*.tif") if "label" not in p.name)[:SCENES]


def rust(address, sampler, batches, dataset="warm"):
    out = subprocess.run([svc.binary("cogfeed-client"), "--server", address, "bench", "--dataset", dataset,
                          "--sampler", sampler, "--patch-size", str(PATCH), "--batch-size", str(BATCH),
                          "--max-batches", str(batches), "--samples-per-epoch", str(batches * BATCH),
                          "--dtype", "native", "--duration", "600"], check=True, capture_output=True, text=True)
    o = json.loads(out.stdout.strip().splitlines()[-1])
    after = o["bytes"] - o["bytes"] / o["batches"]
    return {"mb_per_s": after / (o["seconds"] - o["first_batch_s"]) / 1e6, "cpu_s_per_gb": o["client_cpu_s_per_gb"]}


def python(address, sampler, batches, torch_tensors):
    import cogfeed
    import cogfeed.torch

    args = dict(sampler=sampler, patch_size=PATCH, batch_size=BATCH, samples_per_epoch=batches * BATCH,
                max_batches=batches, dtype="native")
    def epochs():
        # Epoch after epoch (an aligned epoch here is 64 batches), as the Rust client does.
        for epoch in range(1 << 30):
            if torch_tensors:
                yield from cogfeed.torch.StreamDataset(address, "warm", epoch=epoch, **args)
            else:
                yield from cogfeed.Loader(address, "warm", epoch=epoch, **args)

    size = (lambda b: b["image"].numel() * b["image"].element_size()) if torch_tensors else (lambda b: b.image.nbytes)
    it = epochs()
    n = size(next(it))
    t, cpu, nbytes = time.perf_counter(), time.process_time(), 0
    for _ in range(batches - 1):
        nbytes += size(next(it))
    secs = time.perf_counter() - t
    assert n * (batches - 1) == nbytes, (n, nbytes)
    return {"mb_per_s": nbytes / secs / 1e6, "cpu_s_per_gb": (time.process_time() - cpu) / (nbytes / 1e9)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", type=int, default=256)
    ap.add_argument("--sampler", default="aligned,random")
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/cogfeed-bench/warm"))
    ap.add_argument("--out")
    a = ap.parse_args()
    scenes = data(a.data)
    work = Path(tempfile.mkdtemp(prefix="cogfeed-warm-"))
    d = svc.Daemon(work / "d", {"warm": [p.as_uri() for p in scenes]}).start()
    port = svc.free_port()
    synth = subprocess.Popen([svc.binary("cogfeed"), "serve-synthetic", "--listen", f"127.0.0.1:{port}",
                              "--batch-size", str(BATCH), "--bands", str(BANDS), "--patch-size", str(PATCH)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=svc.die_with_parent)
    svc.wait_port(port, proc=synth)
    runs = []
    try:
        # Every tile decoded once: an aligned epoch covers them all.
        rust(d.address, "aligned", SCENES * (SIZE // PATCH) ** 2 // BATCH)
        for rep in range(a.reps):
            for sampler in a.sampler.split(","):
                for who, f in [("daemon rust", lambda: rust(d.address, sampler, a.batches)),
                               ("bare tonic rust", lambda: rust(f"127.0.0.1:{port}", sampler, a.batches)),
                               ("daemon python", lambda: python(d.address, sampler, a.batches, False)),
                               ("daemon torch", lambda: python(d.address, sampler, a.batches, True))]:
                    if who.startswith("bare") and sampler != a.sampler.split(",")[0]:
                        continue  # the synthetic stream has no sampler
                    r = f()
                    r.update(who=who, sampler=sampler, rep=rep)
                    runs.append(r)
                    log(f"rep {rep} {sampler:8s} {who:16s} {r['mb_per_s']:7.0f} MB/s  {r['cpu_s_per_gb']:.2f} CPU-s/GB")
    finally:
        svc.stop(synth)
        d.stop()
    med = lambda who, s: statistics.median(r["mb_per_s"] for r in runs if r["who"] == who and r["sampler"] == s)  # noqa: E731
    bare = med("bare tonic rust", a.sampler.split(",")[0])
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"\ncommit {commit}; {SCENES} scenes {SIZE}² x {BANDS} uint16 cached, {PATCH} px, batch {BATCH} "
          f"({BATCH * BANDS * PATCH * PATCH * 2 >> 20} MiB), medians of {a.reps}; bare tonic: {bare:.0f} MB/s\n")
    print("| sampler | daemon → Rust MB/s | ÷ bare tonic (≥ 0.8) | Python MB/s | Python ÷ Rust (≥ 0.85) | torch MB/s | torch ÷ Rust |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for s in a.sampler.split(","):
        r, p, t = med("daemon rust", s), med("daemon python", s), med("daemon torch", s)
        summary[s] = {"rust": r, "bare": bare, "python": p, "torch": t}
        print(f"| {s} | {r:.0f} | {r / bare:.2f} | {p:.0f} | {p / r:.2f} | {t:.0f} | {t / r:.2f} |")
    if a.out:
        Path(a.out).write_text(json.dumps({"commit": commit, "runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
