"""Runs every example of docs/examples/ against a real daemon serving the embedded demos
(`cogfeed serve` without a config: demo, demo-stac, demo-series), each as a script, as a
reader would: it must exit 0 and print what it says it does. An example whose optional
dependencies (torchgeo, lightning, xarray) this Python lacks is skipped, so `.ci/test` runs
this file in both of its Pythons: the system one (xarray) and the torchgeo venv (torchgeo,
lightning). A new example without a test here fails `test_every_example_is_run`.

Run: ``python3 -m pytest -q docs/test_examples.py`` from the repository root (the daemon is
``$CARGO_TARGET_DIR/release/cogfeed``, or ``COGFEED_BIN_DIR``, or ``target/release``).
"""

import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
TESTED = {"torchgeo_train.py", "lightning_train.py", "xarray_explore.py"}


def _binary():
    dirs = [os.environ.get("COGFEED_BIN_DIR")]
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(os.path.join(os.environ["CARGO_TARGET_DIR"], "release"))
    dirs.append(str(ROOT / "target" / "release"))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "cogfeed")):
            return os.path.join(d, "cogfeed")
    pytest.fail("cogfeed is not built: run `cargo build --release --bins` first")


def _needs(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed in this Python")


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"127.0.0.1:{port}"
    proc = subprocess.Popen([_binary(), "serve", "--data-dir", str(tmp_path_factory.mktemp("demo")), "--listen",
                             addr, "--metrics-listen", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log, deadline = [], time.time() + 120
    for line in proc.stderr:
        log.append(line)
        if "grpc listening on" in line:
            break
        if time.time() > deadline:
            proc.kill()
            pytest.fail("daemon did not start:\n" + "".join(log))
    else:
        pytest.fail(f"daemon exited with {proc.wait()}:\n" + "".join(log))
    threading.Thread(target=log.extend, args=(proc.stderr,), daemon=True).start()
    yield addr
    proc.terminate()
    proc.wait(10)


def _run(name, *args, timeout=120):
    # The repository's client first, so the examples run against the code beside them.
    path = os.pathsep.join([str(ROOT / "client" / "python"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore")
    start = time.time()
    p = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p.stdout, time.time() - start


def test_every_example_is_run():
    assert {p.name for p in EXAMPLES.glob("*.py")} == TESTED


@_needs("xarray")
def test_xarray_explore(address):
    out, took = _run("xarray_explore.py", address)
    assert re.search(r"demo-series: \d+ Items", out) and "<xarray.Dataset>" in out
    assert "s2 mean per date and band" in out and "label classes:" in out
    assert len(re.findall(r"sample \d: \S+ split=train s2 \{'time': 3, 'band': 4, 'y': 64, 'x': 64\}", out)) == 4
    assert took < 60


@_needs("torchgeo")
def test_torchgeo_train(address):
    out, took = _run("torchgeo_train.py", address)
    for what in ("random access", "stream"):
        losses = re.findall(rf"{what} step \d: image \(8, 4, 64, 64\) loss (\d+\.\d+)", out)
        assert len(losses) == 4, out
    assert took < 90


@_needs("lightning")
def test_lightning_train_and_resume(address, tmp_path):
    out, _ = _run("lightning_train.py", address, "--out", tmp_path)
    assert re.search(r"trained 8 steps; val_loss \d+\.\d+; data state \{'epoch': 0, 'cursor': 32", out), out
    ckpt = tmp_path / "epoch=0-step=3.ckpt"
    assert ckpt.exists(), out
    # Resumed from the step-3 checkpoint: the epoch's other 5 steps, from the cursor.
    again, _ = _run("lightning_train.py", address, "--out", tmp_path / "again", "--resume", ckpt)
    assert re.search(r"trained 8 steps; .*'cursor': 32", again), again
    assert sorted(os.listdir(tmp_path / "again")) == ["epoch=0-step=6.ckpt"], "it went on after step 3"
