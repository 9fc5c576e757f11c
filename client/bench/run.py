#!/usr/bin/env python3
"""cogfeed vs the paper's loader (Zaytar et al. 2025), side by side: the one command.

    python3 client/bench/run.py [--quick] [--out results.json] [--scenarios cold,jobs,aligned,prefetch]

Owns the scenarios, their order, the medians and the final tables. Starts everything it
needs on 127.0.0.1 (services.py): data (gen_data.py, once), nginx over the data folder, one
delay proxy per latency in front of nginx, then for each measurement either a fresh cogfeed
daemon (default settings, only listen addresses, cache capacity and datasets configured)
driven by `cogfeed-client bench --dtype native`, or peer.py (rasterio through /vsicurl/,
torch DataLoader workers). Both contenders read the same files through the same proxy.

Workload (both contenders): 256 px patches, batch 16, 4-band uint16. cogfeed's measured
pass is one epoch of its random sampler (as many samples as non-overlapping patches, about
the data set's size); the peer, which has no cache and so a steady rate, runs
--peer-duration seconds once all its workers are reading.

Scenarios (medians of --reps repetitions; contenders alternate inside each repetition):
  cold      per compression and latency: cogfeed on a fresh daemon (first pass, then the
            same pass again = warm, scenario b), the peer's tuned config, and the peer's
            default config (first compression, lowest and highest latency only)
  jobs      k = 4 concurrent jobs (different seeds) on one fresh daemon, at the highest
            latency, against the cold run there (k = 1): store bytes and aggregate MB/s;
            the peer: 4 processes sharing its workers
  aligned   512 px windows, aligned vs unaligned random, once every tile is cached (cogfeed)
            and for the peer (block vs random sampler): store bytes per delivered byte, MB/s
  large     1024 px patches (batch 4) at the highest latency: cogfeed random windows vs the
            peer's tuned config with 1024 px blocked windows (fewer opens per byte)
  prefetch  the look-ahead controller: cold passes at every latency with no flag
            (automatic) and with cogfeed-client --prefetch 64, 128, 256, 512; target:
            automatic >= 0.95 x the best fixed depth, end to end (request to last batch)
  peersweep the peer's tuned config at the highest latency with 8..96 workers, and with
            1024 px windows (choose --peer-workers, --peer-workers-large); not in the default list

MB/s is the paper's metric: decoded pixels delivered x 2 bytes (uint16) / wall time, after
start-up (cogfeed: after its first batch; the peer: once every worker has read a sample;
time to first batch is reported apart). CPU s/GB: the contender's processes (daemon +
client; peer process + workers), not nginx or the proxy (reported apart as infra). Store
bytes: nginx's access log (both contenders) and cogfeed's cogfeed_store_bytes_total.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import services as svc

HERE = Path(__file__).resolve().parent
GEN_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
ALL_CODECS = ["deflate", "zstd", "lzw", "lerc_zstd", "none"]
TARGETS = {"vs_peer": 3.0, "latency": 0.9, "jobs": 1.2, "aligned": 1.1, "lookahead": 0.95}
# Fixed look-ahead depths the automatic one is measured against (scenario prefetch).
PREFETCH_SWEEP = [64, 128, 256, 512]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = Path(tempfile.mkdtemp(prefix="cogfeed-bench-"))
        self.results = {"runs": []}
        self.nginx = None
        self.proxies = {}

    # ---------------------------------------------------------------- setup
    def setup(self):
        a = self.a
        codecs = sorted(set(a.compressions) | {a.main_codec}, key=ALL_CODECS.index)
        log(f"data: {a.scenes} scenes of {a.size} px, {','.join(codecs)} under {a.data}")
        subprocess.run([GEN_PYTHON, str(HERE / "gen_data.py"), "--root", a.data, "--scenes", str(a.scenes),
                        "--size", str(a.size), "--compressions", ",".join(codecs)], check=True,
                       stdout=sys.stderr)
        self.nginx = svc.Nginx(Path(a.data) / f"{a.size}px", self.work).start()
        for ms in sorted(set(a.latencies) | {0}):
            self.proxies[ms] = svc.Proxy(self.nginx.port, ms).start()
        self.epoch = a.scenes * (a.size // a.patch) ** 2
        self.results["setup"] = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": machine(), "scenes": a.scenes, "size": a.size, "tile": 512,
            "compressions": a.compressions, "latencies_ms": a.latencies, "reps": a.reps,
            "patch": a.patch, "batch": a.batch, "epoch_samples": self.epoch,
            "peer_workers": a.peer_workers, "peer_workers_large": a.peer_workers_large,
            "peer_duration_s": a.peer_duration,
            "data_bytes": {c: sum(os.path.getsize(u) for u in self.files(c)) for c in codecs},
            "binaries": {b: {"path": svc.binary(b), "mtime": datetime.datetime.fromtimestamp(
                os.path.getmtime(svc.binary(b))).isoformat(timespec="seconds")} for b in ("cogfeed", "cogfeed-client")},
            "git_head": git_head(),
        }

    def files(self, codec):
        return [os.path.join(self.a.data, f"{self.a.size}px", codec, f"scene_{i:02d}.tif")
                for i in range(self.a.scenes)]

    def urls(self, codec, ms):
        port = self.proxies[ms].port
        return [f"http://127.0.0.1:{port}/{codec}/scene_{i:02d}.tif" for i in range(self.a.scenes)]

    def close(self):
        for p in self.proxies.values():
            p.stop()
        if self.nginx:
            self.nginx.stop()

    def wait_idle(self):
        """Waits (up to --wait-idle s) until other processes use under 15 % of the machine."""
        deadline = time.time() + self.a.wait_idle
        while True:
            b0 = svc.machine_busy()
            time.sleep(1)
            b1 = svc.machine_busy()
            frac = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
            if frac < 0.15 or time.time() > deadline:
                if frac >= 0.15:
                    log(f"  machine still {frac:.0%} busy with other work; measuring anyway")
                return frac

    def others(self, busy0, busy1, ours_s, wall):
        """Fraction of the machine used by processes that are not part of the measurement."""
        total = (busy1[0] - busy0[0]) / svc.TICK
        return max(0.0, total - ours_s) / (wall * os.cpu_count())

    def infra_cpu(self):
        pids = self.nginx.pids() + [p.proc.pid for p in self.proxies.values()]
        return sum(svc.cpu_seconds(p) for p in pids)

    # ---------------------------------------------------------------- proxy check
    def proxy_check(self):
        """MB/s of 4 parallel whole-file GETs, direct to nginx vs through the 0 ms proxy."""
        codec = "none" if "none" in self.a.compressions else self.a.main_codec
        name = f"{codec}/scene_00.tif"
        out = {}
        for label, port in (("direct", self.nginx.port), ("proxy_0ms", self.proxies[0].port)):
            best = 0.0
            for _ in range(3):
                t = time.perf_counter()
                procs = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}",
                                           f"http://127.0.0.1:{port}/{name}"], stdout=subprocess.PIPE, text=True)
                         for _ in range(4)]
                total = sum(int(p.communicate()[0] or 0) for p in procs)
                best = max(best, total / (time.perf_counter() - t) / 1e6)
            out[label] = round(best)
        out["ratio"] = round(out["proxy_0ms"] / out["direct"], 2)
        self.results["proxy_check"] = out
        log(f"proxy check (4 parallel GETs of {name}): direct {out['direct']} MB/s, "
            f"through the 0 ms proxy {out['proxy_0ms']} MB/s")

    # ---------------------------------------------------------------- contenders
    def daemon(self, codec, ms, tag):
        d = svc.Daemon(self.work / f"d-{tag}", {"bench": self.urls(codec, ms)})
        return d.start()

    def client_cmd(self, d, sampler="random", patch=None, seed=0, batches=None, prefetch=0, job="bench"):
        patch = patch or self.a.patch
        n = batches or self.epoch_batches(patch)
        return [svc.binary("cogfeed-client"), "--server", d.address, "bench", "--dataset", "bench",
                "--sampler", sampler, "--patch-size", str(patch), "--batch-size", str(self.a.batch),
                "--seed", str(seed), "--max-batches", str(n), "--duration", "600", "--dtype", "native",
                "--prefetch", str(prefetch), "--job", job]

    def epoch_batches(self, patch):
        return self.a.scenes * (self.a.size // patch) ** 2 // self.a.batch

    def cogfeed(self, d, cmds):
        """Runs the client commands concurrently; one record with their sum."""
        off, infra0, busy0 = self.nginx.log_offset(), self.infra_cpu(), svc.machine_busy()
        cpu0, (m0, _) = d.cpu(), d.metrics()
        kids0 = children_cpu()
        t = time.perf_counter()
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=svc.die_with_parent) for c in cmds]
        outs = []
        for p in procs:
            so, se = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"cogfeed-client failed: {se.strip()[-500:]}")
            outs.append(json.loads(so.strip().splitlines()[-1]))
        wall = time.perf_counter() - t
        (m1, _), cpu1, busy1 = d.metrics(), d.cpu(), svc.machine_busy()
        children = children_cpu() - kids0
        delta = {k: m1[k] - m0.get(k, 0.0) for k in m1 if k.startswith("cogfeed_") and not k.endswith("_bucket")}
        nreq, nbytes, nerr = self.nginx.since(off)
        total = sum(o["bytes"] for o in outs)
        # Sustained rate: bytes after each stream's first batch over the time after it.
        after = sum(o["bytes"] - o["bytes"] / o["batches"] for o in outs)
        span = max(o["seconds"] for o in outs) - min(o["first_batch_s"] for o in outs)
        client_cpu = sum(o["client_cpu_s_per_gb"] * o["bytes"] / 1e9 for o in outs)
        infra = self.infra_cpu() - infra0
        store_s = delta.get("cogfeed_store_request_duration_seconds_sum", 0.0)
        store_n = delta.get("cogfeed_store_request_duration_seconds_count", 0.0)
        return {
            "contender": "cogfeed", "jobs": len(cmds), "bytes": total, "wall_s": wall,
            "binary_mtime": d.binary_mtime,
            "mb_per_s": after / span / 1e6,
            "e2e_mb_per_s": total / max(o["seconds"] for o in outs) / 1e6,
            "first_batch_s": max(o["first_batch_s"] for o in outs),
            "wait_p99_ms": max(o["wait_p99_ms"] for o in outs),
            "cpu_s_per_gb": (cpu1 - cpu0 + client_cpu) / (total / 1e9),
            "daemon_cpu_s": cpu1 - cpu0, "client_cpu_s": client_cpu,
            "store_bytes": delta.get("cogfeed_store_bytes_total", 0.0),
            "store_requests": delta.get("cogfeed_store_requests_total", 0.0),
            "nginx_requests": nreq, "nginx_bytes": nbytes, "nginx_errors": nerr,
            "store_request_mean_ms": 1e3 * store_s / store_n if store_n else None,
            "store_in_flight_mean": store_s / wall,
            "cache_hits": delta.get("cogfeed_cache_hits_total", 0.0),
            "cache_misses": delta.get("cogfeed_cache_misses_total", 0.0),
            "starved_s": delta.get("cogfeed_stream_starved_seconds_total", 0.0),
            "decode_mean_ms": 1e3 * delta.get("cogfeed_decode_duration_seconds_sum", 0.0)
            / max(1.0, delta.get("cogfeed_decode_duration_seconds_count", 0.0)),
            "metrics_delta": delta,
            "infra_cpu_s": infra,
            "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
            "others_busy": self.others(busy0, busy1, cpu1 - cpu0 + children + infra, wall),
            "clients": outs,
        }

    def peer(self, codec, ms, preset, seed=0, jobs=1, sampler=None, patch=None, workers=None, batch=None):
        a = self.a
        workers = workers or (a.peer_workers if preset == "tuned" else None)
        base = [sys.executable, str(HERE / "peer.py"), "--preset", preset, "--batch-size", str(batch or a.batch),
                "--duration", str(a.peer_duration),
                "--scene-size", f"{a.size}x{a.size},512x512"]
        if workers:
            base += ["--workers", str(max(1, workers // jobs))]
        if sampler:
            base += ["--sampler", sampler]
        if patch:
            base += ["--patch-size", str(patch)]
        patch = patch or a.patch
        base += ["--max-samples", str(a.scenes * (a.size // patch) ** 2)]
        off, infra0, busy0 = self.nginx.log_offset(), self.infra_cpu(), svc.machine_busy()
        kids0 = children_cpu()
        t = time.perf_counter()
        procs = [subprocess.Popen(base + ["--seed", str(seed + j)] + self.urls(codec, ms), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, preexec_fn=svc.die_with_parent)
                 for j in range(jobs)]
        outs = []
        for p in procs:
            so, se = p.communicate()
            if p.returncode != 0 or not so.strip():
                raise RuntimeError(f"peer failed: {se.strip()[-800:]}")
            outs.append(json.loads(so.strip().splitlines()[-1]))
        wall = time.perf_counter() - t
        busy1 = svc.machine_busy()
        infra = self.infra_cpu() - infra0
        nreq, nbytes, nerr = self.nginx.since(off)
        total = sum(o["read_bytes_total"] for o in outs)
        return {
            "contender": f"peer-{preset}", "jobs": jobs, "workers": outs[0]["workers"], "bytes": total,
            "wall_s": wall, "mb_per_s": sum(o["mb_per_s"] for o in outs),
            "e2e_mb_per_s": sum(o["e2e_mb_per_s"] for o in outs),
            "first_batch_s": max(o["first_batch_s"] for o in outs),
            "cpu_s_per_gb": sum(o["cpu_s"] for o in outs) / max(1e-9, sum(o["bytes_after"] for o in outs) / 1e9),
            "store_bytes": nbytes, "nginx_requests": nreq, "nginx_bytes": nbytes, "nginx_errors": nerr,
            "infra_cpu_s": infra,
            "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
            "others_busy": self.others(busy0, busy1, children_cpu() - kids0 + infra, wall),
            "peers": outs,
        }

    def record(self, scenario, codec, ms, rep, r, **kw):
        r.update(scenario=scenario, codec=codec, latency_ms=ms, rep=rep, **kw)
        if r["nginx_bytes"] == 0 and r["infra_cpu_s"] > 0.2:
            log(f"  warning: nginx and the proxies used {r['infra_cpu_s']:.2f} CPU s with no store traffic")
        self.results["runs"].append(r)
        amp = r["nginx_bytes"] / r["bytes"] if r.get("bytes") else 0
        log(f"  {scenario:8s} {codec:9s} {ms:3d} ms rep {rep} {r['contender']:13s} {kw.get('what', ''):14s} "
            f"{r['mb_per_s']:7.1f} MB/s  first {r['first_batch_s']:5.2f}s  {r['cpu_s_per_gb']:5.2f} CPU s/GB  "
            f"store {r['nginx_bytes'] / 1e6:7.1f} MB ({amp:.2f}/B)  others {r['others_busy']:.0%}")

    # ---------------------------------------------------------------- scenarios
    def cold(self):
        a = self.a
        for codec in a.compressions:
            for ms in a.latencies:
                for rep in range(a.reps):
                    self.wait_idle()
                    d = self.daemon(codec, ms, f"{codec}-{ms}-{rep}")
                    try:
                        self.record("cold", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, seed=rep)]), what="first pass")
                        self.record("warm", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, seed=rep)]), what="second pass")
                    finally:
                        d.stop()
                    self.record("cold", codec, ms, rep, self.peer(codec, ms, "tuned", seed=rep))
                    if codec == a.main_codec and a.peer_default and ms in (min(a.latencies), max(a.latencies)):
                        self.record("cold", codec, ms, rep, self.peer(codec, ms, "default", seed=rep))

    def jobs(self):
        a = self.a
        ms, codec = max(a.latencies), a.main_codec
        for rep in range(a.reps):
            self.wait_idle()
            # k = 1 is the cold scenario's run at this codec and latency (same settings).
            k = 4
            d = self.daemon(codec, ms, f"jobs{k}-{rep}")
            try:
                cmds = [self.client_cmd(d, seed=10 * rep + j, job=f"job{j}") for j in range(k)]
                self.record("jobs", codec, ms, rep, self.cogfeed(d, cmds), what=f"k={k}", k=k)
            finally:
                d.stop()
            self.record("jobs", codec, ms, rep, self.peer(codec, ms, "tuned", seed=10 * rep, jobs=k), what=f"k={k}", k=k)

    def aligned(self):
        a = self.a
        ms, codec, p = max(a.latencies), a.main_codec, 512
        for rep in range(a.reps):
            self.wait_idle()
            d = self.daemon(codec, ms, f"aligned-{rep}")
            try:
                self.record("aligned", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, "aligned", p, seed=rep)]),
                            what="aligned cold", sampler="aligned", cached=False)
                self.record("aligned", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, "aligned", p, seed=rep + 100)]),
                            what="aligned warm", sampler="aligned", cached=True)
                self.record("aligned", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, "random", p, seed=rep + 100)]),
                            what="random warm", sampler="random", cached=True)
            finally:
                d.stop()
            d = self.daemon(codec, ms, f"random-{rep}")
            try:
                self.record("aligned", codec, ms, rep, self.cogfeed(d, [self.client_cmd(d, "random", p, seed=rep)]),
                            what="random cold", sampler="random", cached=False)
            finally:
                d.stop()
            for sampler in ("block", "random"):
                self.record("aligned", codec, ms, rep, self.peer(codec, ms, "tuned", seed=rep, sampler=sampler, patch=p),
                            what=sampler, sampler="aligned" if sampler == "block" else "random", cached=False)

    def large(self):
        """1024 px patches, batch 4, at the highest latency: cogfeed's random (unaligned)
        windows against the peer's tuned config with 1024 px blocked windows."""
        a = self.a
        ms, codec, p, b = max(a.latencies), a.main_codec, 1024, 4
        for rep in range(a.reps):
            self.wait_idle()
            d = self.daemon(codec, ms, f"large-{rep}")
            try:
                cmd = self.client_cmd(d, "random", p, seed=rep, batches=self.epoch_batches(p) * a.batch // b)
                cmd[cmd.index("--batch-size") + 1] = str(b)
                self.record("large", codec, ms, rep, self.cogfeed(d, [cmd]), what="random 1024")
            finally:
                d.stop()
            self.record("large", codec, ms, rep, self.peer(codec, ms, "tuned", seed=rep, patch=p, batch=b,
                                                           workers=a.peer_workers_large), what="block 1024")

    def prefetch(self):
        """The look-ahead controller against a sweep of fixed depths, at every latency, each
        a fresh daemon's cold pass; the order of the depths rotates with the repetition."""
        a = self.a
        codec = a.main_codec
        depths = [0] + PREFETCH_SWEEP
        for rep in range(a.reps):
            self.wait_idle()
            for ms in a.latencies:
                for pf in depths[rep % len(depths):] + depths[:rep % len(depths)]:
                    d = self.daemon(codec, ms, f"pf{pf}-{ms}-{rep}")
                    try:
                        self.record("prefetch", codec, ms, rep,
                                    self.cogfeed(d, [self.client_cmd(d, seed=rep, prefetch=pf)]),
                                    what=f"prefetch {pf or 'auto'}", prefetch=pf)
                    finally:
                        d.stop()

    def peersweep(self):
        a = self.a
        ms, codec = max(a.latencies), a.main_codec
        for w in (8, 16, 32, 64, 96):
            self.wait_idle()
            self.record("peersweep", codec, ms, 0, self.peer(codec, ms, "tuned", workers=w), what=f"{w} workers")
        for w in (8, 16, 32, 64):
            self.wait_idle()
            self.record("peersweep", codec, ms, 0, self.peer(codec, ms, "tuned", workers=w, patch=1024, batch=4),
                        what=f"1024 px, {w} w")

    # ---------------------------------------------------------------- summary
    def pick(self, **f):
        return [r for r in self.results["runs"] if all(r.get(k) == v for k, v in f.items())]

    def med(self, key, **f):
        return median([r[key] for r in self.pick(**f)])

    def summary(self):
        a, rows, raw = self.a, [], []
        res = self.results
        for codec in a.compressions:
            for ms in a.latencies:
                c = dict(codec=codec, latency_ms=ms)
                raw.append({
                    "codec": codec, "latency_ms": ms,
                    "cogfeed_cold": self.med("mb_per_s", scenario="cold", contender="cogfeed", **c),
                    "cogfeed_warm": self.med("mb_per_s", scenario="warm", contender="cogfeed", **c),
                    "peer_tuned": self.med("mb_per_s", scenario="cold", contender="peer-tuned", **c),
                    "peer_default": self.med("mb_per_s", scenario="cold", contender="peer-default", **c),
                    "cogfeed_cpu_s_per_gb": self.med("cpu_s_per_gb", scenario="cold", contender="cogfeed", **c),
                    "peer_tuned_cpu_s_per_gb": self.med("cpu_s_per_gb", scenario="cold", contender="peer-tuned", **c),
                    "peer_default_cpu_s_per_gb": self.med("cpu_s_per_gb", scenario="cold", contender="peer-default", **c),
                    "cogfeed_store_per_byte": self.med_ratio("nginx_bytes", "bytes", scenario="cold", contender="cogfeed", **c),
                    "peer_tuned_store_per_byte": self.med_ratio("nginx_bytes", "bytes", scenario="cold", contender="peer-tuned", **c),
                    "cogfeed_first_batch_s": self.med("first_batch_s", scenario="cold", contender="cogfeed", **c),
                    "cogfeed_store_request_mean_ms": self.med("store_request_mean_ms", scenario="cold", contender="cogfeed", **c),
                    "cogfeed_store_in_flight_mean": self.med("store_in_flight_mean", scenario="cold", contender="cogfeed", **c),
                })
        res["raw"] = raw
        hi, lo = max(a.latencies), min(a.latencies)
        for r in raw:
            if r["cogfeed_cold"] and r["peer_tuned"]:
                rows.append((f"cogfeed / peer tuned, {r['codec']}, {r['latency_ms']} ms", r["cogfeed_cold"] / r["peer_tuned"],
                             TARGETS["vs_peer"] if r["latency_ms"] == hi else None))
        for r in raw:
            if r["peer_tuned"] and r["peer_default"]:
                rows.append((f"peer tuned / peer default, {r['codec']}, {r['latency_ms']} ms",
                             r["peer_tuned"] / r["peer_default"], None))
            if r["cogfeed_warm"] and r["cogfeed_cold"]:
                rows.append((f"cogfeed warm / cold, {r['codec']}, {r['latency_ms']} ms",
                             r["cogfeed_warm"] / r["cogfeed_cold"], None))
        for codec in a.compressions:
            h = next((r for r in raw if r["codec"] == codec and r["latency_ms"] == hi), None)
            l0 = next((r for r in raw if r["codec"] == codec and r["latency_ms"] == lo), None)
            if h and l0 and h["cogfeed_cold"] and l0["cogfeed_cold"] and hi != lo:
                rows.append((f"cogfeed {hi} ms / {lo} ms, {codec}", h["cogfeed_cold"] / l0["cogfeed_cold"], TARGETS["latency"]))
        if self.pick(scenario="jobs"):
            one = dict(scenario="cold", codec=a.main_codec, latency_ms=hi)
            s1 = self.med("store_bytes", contender="cogfeed", **one)
            s4 = self.med("store_bytes", scenario="jobs", contender="cogfeed", k=4)
            t1 = self.med("mb_per_s", contender="cogfeed", **one)
            t4 = self.med("mb_per_s", scenario="jobs", contender="cogfeed", k=4)
            p1 = self.med_ratio("nginx_bytes", "bytes", contender="peer-tuned", **one)
            p4 = self.med_ratio("nginx_bytes", "bytes", scenario="jobs", contender="peer-tuned", k=4)
            if s1:
                rows.append((f"k=4 store bytes / 1 job, cogfeed, {hi} ms", s4 / s1, -TARGETS["jobs"]))
            if p1:
                rows.append((f"k=4 store bytes / 1 job, peer (4 epochs vs 1), {hi} ms", 4 * p4 / p1, None))
            if t1:
                rows.append((f"k=4 aggregate MB/s / 1 job, cogfeed, {hi} ms", t4 / t1, None))
            pt1, pt4 = (self.med("mb_per_s", contender="peer-tuned", **one),
                                   self.med("mb_per_s", scenario="jobs", contender="peer-tuned", k=4))
            if pt1 and pt4:
                rows.append((f"k=4 aggregate MB/s / 1 job, peer, {hi} ms", pt4 / pt1, None))
            res["jobs"] = {"cogfeed_store_1": s1, "cogfeed_store_4": s4, "cogfeed_mb_s_1": t1, "cogfeed_mb_s_4": t4,
                           "peer_store_per_byte_1": p1, "peer_store_per_byte_4": p4,
                           "peer_mb_s_1": self.med("mb_per_s", contender="peer-tuned", **one),
                           "peer_mb_s_4": self.med("mb_per_s", scenario="jobs", contender="peer-tuned", k=4)}
        if self.pick(scenario="large"):
            c = self.med("mb_per_s", scenario="large", contender="cogfeed")
            p = self.med("mb_per_s", scenario="large", contender="peer-tuned")
            res["large"] = {"cogfeed_random_1024_mb_s": c, "peer_block_1024_mb_s": p,
                            "cogfeed_cpu_s_per_gb": self.med("cpu_s_per_gb", scenario="large", contender="cogfeed"),
                            "peer_cpu_s_per_gb": self.med("cpu_s_per_gb", scenario="large", contender="peer-tuned")}
            if c and p:
                rows.append((f"cogfeed random 1024 / peer tuned block 1024, {a.main_codec}, {hi} ms", c / p, None))
        if self.pick(scenario="prefetch"):
            res["prefetch"] = {}
            for ms in a.latencies:
                f = dict(scenario="prefetch", contender="cogfeed", latency_ms=ms)
                # End to end (request to last batch): a deeper look-ahead loads more before the
                # first batch, which the after-start-up rate would not charge it for.
                by = {pf: self.med("e2e_mb_per_s", prefetch=pf, **f) for pf in [0] + PREFETCH_SWEEP}
                fixed = {pf: v for pf, v in by.items() if pf and v}
                res["prefetch"][ms] = {"auto" if pf == 0 else str(pf): v for pf, v in by.items()}
                if by[0] and fixed:
                    best = max(fixed, key=fixed.get)
                    rows.append((f"look-ahead: automatic / best fixed (prefetch {best}), {a.main_codec}, {ms} ms",
                                 by[0] / fixed[best], TARGETS["lookahead"]))
        if self.pick(scenario="aligned"):
            f = dict(scenario="aligned", contender="cogfeed")
            out = {}
            for s in ("aligned", "random"):
                for cached in (False, True):
                    k = f"cogfeed_{s}_{'warm' if cached else 'cold'}"
                    out[k + "_store_bytes"] = self.med("store_bytes", sampler=s, cached=cached, **f)
                    out[k + "_mb_s"] = self.med("mb_per_s", sampler=s, cached=cached, **f)
                out[f"peer_{s}_store_per_byte"] = self.med_ratio("nginx_bytes", "bytes", scenario="aligned",
                                                                 contender="peer-tuned", sampler=s)
                out[f"peer_{s}_mb_s"] = self.med("mb_per_s", scenario="aligned", contender="peer-tuned", sampler=s)
            res["aligned"] = out
            ra, rr = out["cogfeed_aligned_warm_store_bytes"], out["cogfeed_random_warm_store_bytes"]
            # Both are ~0 once cached: compare with 1 MB of slack so 0 / 0 reads as 1.
            rows.append((f"random / aligned store bytes, cached, cogfeed ({rr / 1e6:.1f} / {ra / 1e6:.1f} MB)",
                         (rr + 1e6) / (ra + 1e6), -TARGETS["aligned"]))
            if out["peer_aligned_store_per_byte"]:
                rows.append(("random / aligned store bytes, peer (per delivered byte)",
                             out["peer_random_store_per_byte"] / out["peer_aligned_store_per_byte"], None))
            if out["cogfeed_aligned_warm_mb_s"]:
                rows.append(("random / aligned MB/s, cached, cogfeed",
                             out["cogfeed_random_warm_mb_s"] / out["cogfeed_aligned_warm_mb_s"], None))
        res["ratios"] = [{"name": n, "value": v, "target": t,
                          "pass": None if t is None else (v >= t if t > 0 else v <= -t)} for n, v, t in rows]

    def med_ratio(self, num, den, **f):
        return median([r[num] / r[den] for r in self.pick(**f) if r.get(den)])

    def print_tables(self):
        res = self.results
        print("\nraw medians: MB/s after the first batch (decoded px x 2 B); CPU s/GB; store bytes per delivered byte")
        print(f"{'codec':10s} {'lat':>4s} {'cf cold':>8s} {'cf warm':>8s} {'peer tuned':>10s} {'peer def':>9s} "
              f"{'cf CPU':>7s} {'tuned CPU':>9s} {'def CPU':>8s} {'cf st/B':>8s} {'tuned st/B':>10s} {'cf 1st s':>8s}")
        fmt = lambda v, w, p=1: f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}s}"  # noqa: E731
        for r in res["raw"]:
            print(f"{r['codec']:10s} {r['latency_ms']:4d} {fmt(r['cogfeed_cold'], 8)} {fmt(r['cogfeed_warm'], 8)} "
                  f"{fmt(r['peer_tuned'], 10)} {fmt(r['peer_default'], 9)} {fmt(r['cogfeed_cpu_s_per_gb'], 7, 2)} "
                  f"{fmt(r['peer_tuned_cpu_s_per_gb'], 9, 2)} {fmt(r['peer_default_cpu_s_per_gb'], 8, 2)} "
                  f"{fmt(r['cogfeed_store_per_byte'], 8, 2)} {fmt(r['peer_tuned_store_per_byte'], 10, 2)} "
                  f"{fmt(r['cogfeed_first_batch_s'], 8, 2)}")
        print("\nratios")
        print(f"{'':64s} {'value':>7s} {'target':>8s} result")
        for r in res["ratios"]:
            t = r["target"]
            ts = "" if t is None else (f">= {t:g}" if t > 0 else f"<= {-t:g}")
            ps = "" if r["pass"] is None else ("PASS" if r["pass"] else "MISS")
            print(f"{r['name']:64s} {r['value']:7.2f} {ts:>8s} {ps}")


def git_head():
    try:
        return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def children_cpu():
    """CPU seconds of this process's finished children (clients, peers and their workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine():
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "kernel": platform.release(), "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)}


def merge(b, path):
    """Adds the runs of an earlier results file that this invocation did not redo (same
    scenario, compression and latency; a redone cold run replaces its warm pass too); the
    tables then cover both, with the earlier file's compressions and latencies."""
    old = json.loads(Path(path).read_text())
    group = lambda r: ("cold" if r["scenario"] == "warm" else r["scenario"], r["codec"], r["latency_ms"])  # noqa: E731
    redone = {group(r) for r in b.results["runs"]}
    kept = [r for r in old["runs"] if group(r) not in redone]
    b.results["runs"] = kept + b.results["runs"]
    b.results["merged"] = {"from": path, "kept_runs": len(kept), "redone": sorted(map(list, redone)),
                           "earlier_setup": old.get("setup")}
    a, s = b.a, old.get("setup", {})
    a.compressions = s.get("compressions", a.compressions)
    a.main_codec = a.compressions[0]
    a.latencies = s.get("latencies_ms", a.latencies)
    log(f"merged {len(kept)} runs from {path}; redone here: {sorted(redone)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 scenes, DEFLATE, 0 and 80 ms (about 5 minutes)")
    ap.add_argument("--out", default="cogfeed-bench-results.json")
    ap.add_argument("--data", default=os.environ.get("COGFEED_BENCH_DATA", os.path.expanduser("~/.cache/cogfeed-bench/data")))
    ap.add_argument("--scenarios", help="comma list of cold,jobs,aligned,large,prefetch,peersweep (default: all but peersweep)")
    ap.add_argument("--compressions", help=f"comma list of {','.join(ALL_CODECS)}")
    ap.add_argument("--latencies", help="one-way ms, comma list (default 0,20,80; quick 0,80)")
    ap.add_argument("--reps", type=int, help="repetitions per measurement (default 3; quick 1)")
    ap.add_argument("--scenes", type=int)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--patch", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--peer-workers", type=int, default=64,
                    help="workers of the peer's tuned config (the paper's 64: also the best here, see peersweep)")
    ap.add_argument("--peer-workers-large", type=int, default=32,
                    help="workers of the peer's tuned config with 1024 px windows (the best here, see peersweep)")
    ap.add_argument("--peer-duration", type=float, help="seconds per peer measurement after its first batch")
    ap.add_argument("--no-peer-default", dest="peer_default", action="store_false")
    ap.add_argument("--merge", help="an earlier --out file: keep its runs that this invocation does not redo")
    ap.add_argument("--wait-idle", type=float, default=5.0,
                    help="before each repetition, wait up to this many seconds for other work to stop")
    a = ap.parse_args()
    a.scenes = a.scenes or (4 if a.quick else 8)
    a.reps = a.reps or (1 if a.quick else 3)
    a.compressions = (a.compressions or ("deflate" if a.quick else ",".join(ALL_CODECS))).split(",")
    a.main_codec = a.compressions[0]
    a.latencies = [int(x) for x in (a.latencies or ("0,80" if a.quick else "0,20,80")).split(",")]
    a.peer_duration = a.peer_duration or 6.0
    scenarios = (a.scenarios or "cold,jobs,aligned,large,prefetch").split(",")
    b = Bench(a)
    t0 = time.time()
    try:
        b.setup()
        b.proxy_check()
        for s in scenarios:
            log(f"scenario {s}")
            getattr(b, s)()
    finally:
        b.close()
    b.results["elapsed_s"] = time.time() - t0
    if a.merge:
        merge(b, a.merge)
    b.summary()
    Path(a.out).write_text(json.dumps(b.results, indent=1))
    b.print_tables()
    print(f"\nraw results: {a.out}; {b.results['elapsed_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
