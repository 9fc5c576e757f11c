#!/usr/bin/env python3
"""End-to-end check of the dashboards and alerts against a real Prometheus.

Starts the daemon (demo data) and Prometheus on 127.0.0.1 (scraping every second, with the
alert rules loaded), drives load with the Rust client (two jobs, plus one failing request),
then evaluates every PromQL expression of every panel of dashboards/cogfeed.json through
Prometheus' HTTP API: each must return a non-empty result. Also runs `promtool check
metrics` on the daemon's exposition. Prints 'N passed, M failed' and exits non-zero on any
failure. Needs: prometheus + promtool (Debian package `prometheus`), cargo-built binaries.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_http(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            get(url)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def main():
    tmp = Path(tempfile.mkdtemp(prefix="cogfeed-prom-"))
    grpc, metrics, prom = free_port(), free_port(), free_port()
    procs = []
    try:
        daemon = subprocess.Popen(
            [str(BIN / "cogfeed"), "serve", "--data-dir", str(tmp / "demo"), "--listen", f"127.0.0.1:{grpc}",
             "--metrics-listen", f"127.0.0.1:{metrics}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(daemon)
        wait_http(f"http://127.0.0.1:{metrics}/readyz")
        config = tmp / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {ROOT / 'deploy' / 'prometheus' / 'alerts.yml'}
scrape_configs:
  - job_name: cogfeed
    honor_labels: true
    static_configs:
      - targets: ['127.0.0.1:{metrics}']
""")
        subprocess.run(["promtool", "check", "config", str(config)], check=True, capture_output=True)
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(prometheus)
        wait_http(f"http://127.0.0.1:{prom}/-/ready")

        client = str(BIN / "cogfeed-client")
        base = [client, "--server", f"127.0.0.1:{grpc}", "bench", "--dataset", "demo", "--batch-size", "8"]
        load = [subprocess.Popen(base + ["--job", "train-a", "--sampler", "random", "--duration", "8"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                subprocess.Popen(base + ["--job", "train-b", "--sampler", "aligned", "--duration", "8"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        subprocess.run([client, "--server", f"127.0.0.1:{grpc}", "stream", "--dataset", "demo", "--patch-size",
                        "9999"], capture_output=True)
        # A Python loader over two epochs: it reports its data wait at each stream open.
        subprocess.run([sys.executable, "-c", (
            "import cogfeed\n"
            f"l = cogfeed.Loader('127.0.0.1:{grpc}', 'demo', job='train-py', batch_size=8, max_batches=20)\n"
            "for e in range(2):\n"
            "    l.set_epoch(e)\n"
            "    for b in l: pass\n")], check=True, capture_output=True, timeout=120)
        for p in load:
            p.wait(60)
        time.sleep(3)

        exposition = get(f"http://127.0.0.1:{metrics}/metrics")
        lint = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True)
        results = [("promtool check metrics", lint.returncode == 0, (lint.stdout + lint.stderr).strip())]

        dashboard = json.loads((ROOT / "dashboards" / "cogfeed.json").read_text())
        subs = {"$dataset": ".*", "$job": ".*", "$scrape_job": "cogfeed", "$__rate_interval": "30s"}
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for k, v in subs.items():
                    expr = expr.replace(k, v)
                url = f"http://127.0.0.1:{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
                body = json.loads(get(url))
                n = len(body.get("data", {}).get("result", []))
                ok = body.get("status") == "success" and n > 0
                results.append((f"{panel['title']} [{target['refId']}]", ok, f"{n} series" if ok else f"{body} for {expr}"))
        rules = json.loads(get(f"http://127.0.0.1:{prom}/api/v1/rules"))
        names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
        results.append(("alert rules loaded", len(names) == 4, ", ".join(sorted(names))))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    failed = [r for r in results if not r[1]]
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
