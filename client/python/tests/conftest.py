"""Fixtures: the real daemon binary started on 127.0.0.1, with the demo dataset."""

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def binary(name):
    """A cargo-built binary: $COGFEED_BIN_DIR, $CARGO_TARGET_DIR/release or target/release."""
    dirs = [os.environ.get("COGFEED_BIN_DIR")]
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(os.path.join(os.environ["CARGO_TARGET_DIR"], "release"))
    dirs.append(str(ROOT / "target" / "release"))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    pytest.fail(f"{name} not built: run `cargo build --release` first")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One `cogfeed serve` process on a fixed port (so it can be restarted in place): the
    demo datasets of `data_dir`, or the datasets of the TOML file `config`."""

    def __init__(self, data_dir=None, port=None, config=None):
        self.data_dir = data_dir
        self.config = config
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        source = ["--config", str(self.config)] if self.config else ["--data-dir", str(self.data_dir)]
        self.proc = subprocess.Popen(
            [binary("cogfeed"), "serve", *source, "--listen", self.address,
             "--metrics-listen", "127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.time() + 60
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            if re.search(r"grpc listening on", line):
                break
            if time.time() > deadline:
                raise RuntimeError("daemon did not start")
        else:
            raise RuntimeError(f"daemon exited with {self.proc.wait()}:\n" + "".join(self.log))
        # Keep reading its log, so that the daemon never blocks on a full pipe.
        threading.Thread(target=self.log.extend, args=(self.proc.stderr,), daemon=True).start()
        return self

    def kill(self):
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([binary("cogfeed"), "demo-data", str(d)], check=True, capture_output=True)
    return d


@pytest.fixture(scope="session")
def daemon(demo_dir):
    d = Daemon(demo_dir).start()
    yield d
    d.stop()


@pytest.fixture
def fresh_daemon(demo_dir):
    d = Daemon(demo_dir).start()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def rust_client():
    return binary("cogfeed-client")


def has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


requires_torch = pytest.mark.skipif(not has_torch(), reason="torch is not installed (pip install torch)")
__all__ = ["Daemon", "requires_torch", "shutil"]
