#!/usr/bin/env python3
"""The published multimodal workload, in miniature, from a STAC archive over HTTP with latency.

    python3 client/bench/series_bench.py [--latencies 0,80] [--duration 20] [--runs 3] [--json OUT]

Writes a time-series archive with `cogfeed demo-series` (two 2.56 km UTM tiles; 16 Sentinel-2-like
dates x 10 bands at 10 m with their SCL; 8 Sentinel-1-like passes, ascending and descending, VV/VH at
20 m; land cover in EPSG:4326; 1.4k small COGs), serves it with nginx behind the delay proxy (the
headline benchmark's harness, services.py), and streams, per latency, from a fresh daemon:

    s2     [B, 16, 10, 32, 32]   the 16 latest dates up to the drawn one, bilinear
    s1_asc [B, 4, 2, 32, 32]     4 ascending passes at 10 m
    s1_desc[B, 4, 2, 32, 32]     4 descending passes
    label  [B, 1, 320, 320]      land cover at 1 m (x10 finer), mode

with `cogfeed-client bench --sampler random --patch-size 32 --batch-size 16`. `--store s3` serves the
archive from s3s-fs (an S3 server; `bash .ci/test` installs it under $COGFEED_TOOLS) instead of nginx,
and the daemon reads `s3://seed/items.json` through the delay proxy. Reports delivered MB/s and
samples/s, cold (fresh daemon: every tile fetched through the proxy) and warm (the same daemon again),
and the daemon's CPU seconds per GB; medians of --runs.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import services as svc  # noqa: E402

DATASET = """
[[datasets]]
name = "seed"
stac = "{url}"
crs = "native"

[[datasets.layers]]
name = "s2"
assets = ["B02", "B03", "B04", "B08", "B05", "B06", "B07", "B8A", "B11", "B12"]
resolution = 10
resampling = "bilinear"
time_steps = 16
filter = {{ collections = ["sentinel-2-l2a-series"] }}

[[datasets.layers]]
name = "s1_asc"
assets = ["vv", "vh"]
resolution = 10
resampling = "bilinear"
time_steps = 4
filter = {{ collections = ["sentinel-1-rtc-series"], "sat:orbit_state" = "ascending" }}

[[datasets.layers]]
name = "s1_desc"
assets = ["vv", "vh"]
resolution = 10
resampling = "bilinear"
time_steps = 4
filter = {{ collections = ["sentinel-1-rtc-series"], "sat:orbit_state" = "descending" }}

[[datasets.layers]]
name = "label"
assets = ["classes"]
resolution = 1
resampling = "mode"
nodata = 255
"""


class S3Server:
    """s3s-fs serving the archive as bucket `seed` (hard links, so nothing is copied)."""

    KEY, SECRET = "test", "testtesttest"

    def __init__(self, archive, work):
        self.archive, self.root = Path(archive), Path(work) / "s3root"

    def start(self):
        exe = Path(os.environ.get("COGFEED_TOOLS", Path.home() / ".cache" / "cogfeed-tools")) / "bin" / "s3s-fs"
        if not exe.exists():
            sys.exit(f"{exe} not found: run `bash .ci/test` once, or set COGFEED_TOOLS")
        if not (self.root / "seed" / "items.json").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-al", str(self.archive), str(self.root / "seed")], check=True)
        self.port = svc.free_port()
        self.proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(self.port), "--access-key",
                                      self.KEY, "--secret-key", self.SECRET, str(self.root)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=svc.die_with_parent)
        svc.wait_port(self.port, proc=self.proc)
        return self

    def stop(self):
        svc.stop(self.proc)


def bench(daemon, duration):
    out = subprocess.run(
        [svc.binary("cogfeed-client"), "--server", daemon.address, "bench", "--dataset", "seed",
         "--sampler", "random", "--patch-size", "32", "--batch-size", "16", "--samples-per-epoch", "100000000",
         "--duration", str(duration), "--job", "seed"],
        capture_output=True, text=True, check=True).stdout
    report = json.loads(out[out.index("{"):])
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latencies", default="0,80")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "cogfeed-series-bench"))
    ap.add_argument("--json")
    ap.add_argument("--store", choices=["http", "s3"], default="http")
    a = ap.parse_args()
    work = Path(a.work)
    archive = work / "archive"
    if not (archive / "items.json").exists():
        subprocess.run([svc.binary("cogfeed"), "demo-series", str(archive), "--s2-dates", "16", "--s2-bands", "10",
                        "--s1-dates", "8"], check=True)
    if a.store == "s3":
        server = S3Server(archive, work).start()
    else:
        server = svc.Nginx(archive, work).start()
    results = {}
    try:
        for ms in [int(x) for x in a.latencies.split(",")]:
            proxy = svc.Proxy(server.port, ms).start()
            rows = []
            try:
                for run in range(a.runs):
                    if a.store == "s3":
                        url = "s3://seed/items.json"
                        store = (f'[store]\ns3_endpoint = "http://127.0.0.1:{proxy.port}"\n'
                                 f's3_access_key_id = "{S3Server.KEY}"\ns3_secret_access_key = "{S3Server.SECRET}"\n')
                    else:
                        url, store = f"http://127.0.0.1:{proxy.port}/items.json", ""
                    d = svc.Daemon(work / f"daemon-{ms}-{run}", {},
                                   extra_toml=store + DATASET.format(url=url)).start()
                    try:
                        cpu0 = d.cpu()
                        cold = bench(d, a.duration)
                        cpu1 = d.cpu()
                        warm = bench(d, a.duration)
                        cpu2 = d.cpu()
                    finally:
                        d.stop()
                    row = {"cold": cold, "warm": warm,
                           "cold_cpu_s_per_gb": (cpu1 - cpu0) / max(cold["bytes"], 1) * 1e9,
                           "warm_cpu_s_per_gb": (cpu2 - cpu1) / max(warm["bytes"], 1) * 1e9}
                    rows.append(row)
                    print(f"{ms} ms run {run}: cold {cold['mb_per_s']:.1f} MB/s, warm {warm['mb_per_s']:.1f} MB/s",
                          file=sys.stderr)
            finally:
                proxy.stop()
            med = lambda f: round(statistics.median(f(r) for r in rows), 2)  # noqa: E731
            results[ms] = {
                "cold_mb_per_s": med(lambda r: r["cold"]["mb_per_s"]),
                "warm_mb_per_s": med(lambda r: r["warm"]["mb_per_s"]),
                "cold_samples_per_s": med(lambda r: r["cold"]["samples"] / r["cold"]["seconds"]),
                "warm_samples_per_s": med(lambda r: r["warm"]["samples"] / r["warm"]["seconds"]),
                "cold_cpu_s_per_gb": med(lambda r: r["cold_cpu_s_per_gb"]),
                "warm_cpu_s_per_gb": med(lambda r: r["warm_cpu_s_per_gb"]),
                "first_batch_s": med(lambda r: r["cold"]["first_batch_s"]),
            }
    finally:
        server.stop()
    print(json.dumps(results, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
