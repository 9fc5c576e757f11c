"""Processes the benchmark starts on 127.0.0.1, and how to read their counters.

Owns: the store (nginx serving the data folder with Range support, its access log counting
requests and bytes), the delay proxies in front of it, the cogfeed daemon (a generated TOML
config, readiness on /readyz, Prometheus metrics), and CPU accounting from /proc. Every
process is started by this module and stopped by its own pid; nothing else is touched.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def die_with_parent():
    """preexec_fn: the child gets SIGTERM when the benchmark process dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30.0, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def binary(name):
    """A cargo-built binary: $COGFEED_BIN_DIR, $CARGO_TARGET_DIR/release or target/release."""
    dirs = [os.environ.get("COGFEED_BIN_DIR")]
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(os.path.join(os.environ["CARGO_TARGET_DIR"], "release"))
    dirs.append(str(ROOT / "target" / "release"))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"{name} not found: build it with `cargo build --release` (or set COGFEED_BIN_DIR)")


def cpu_seconds(pid):
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def minor_faults(pid):
    """Minor page faults of one process so far (0 when it is gone): pages the kernel had to
    hand it, zeroed, the cost of memory an allocator gave back and takes again."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[7])
    except (OSError, IndexError, ValueError):
        return 0


def machine_busy():
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def stop(proc, timeout=10.0):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Nginx:
    """nginx serving `root` on a free port; the access log gives requests and bytes sent."""

    def __init__(self, root, workdir):
        self.root = str(root)
        self.dir = Path(workdir) / "nginx"
        self.port = free_port()
        self.proc = None
        self.log = self.dir / "access.log"

    def start(self):
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(exe):
            sys.exit("nginx not found: apt-get install -y nginx-light")
        self.dir.mkdir(parents=True, exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        d = self.dir
        conf = f"""{user}worker_processes 2;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format bench '$bytes_sent $status';
    access_log {self.log} bench;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
        autoindex off;
    }}
}}
"""
        (d / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen([exe, "-p", str(d), "-c", str(d / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=die_with_parent)
        wait_port(self.port, proc=self.proc)
        return self

    def pids(self):
        """Master and workers (children of the master)."""
        if self.proc is None:
            return []
        out = [self.proc.pid]
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
        return out

    def log_offset(self):
        return self.log.stat().st_size if self.log.exists() else 0

    def since(self, offset):
        """(requests, bytes sent, errors) logged after `offset`."""
        n = total = errors = 0
        with open(self.log, "rb") as f:
            f.seek(offset)
            for line in f:
                parts = line.split()
                if len(parts) < 2:
                    continue
                n += 1
                total += int(parts[0])
                if not parts[1].startswith(b"2"):
                    errors += 1
        return n, total, errors

    def stop(self):
        stop(self.proc)


class Proxy:
    """One delay_proxy.py process in front of `upstream_port`."""

    def __init__(self, upstream_port, delay_ms):
        self.upstream = upstream_port
        self.delay_ms = delay_ms
        self.proc = None
        self.port = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "delay_proxy.py"), "--listen", "127.0.0.1:0",
             "--upstream", f"127.0.0.1:{self.upstream}", "--delay-ms", str(self.delay_ms)],
            stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if not m:
            raise RuntimeError(f"delay proxy did not start: {line!r}")
        self.port = int(m.group(1))
        return self

    def stop(self):
        stop(self.proc)


def toml_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cluster_toml(addr, addrs, near_bytes=None):
    """The `[cluster]` section of replica `addr` in a static fleet of `addrs` (a long peer
    timeout: benchmarks share one loaded machine), with `near_cache_bytes` when given."""
    peers = ", ".join(f'"{a}"' for a in addrs)
    text = f'[cluster]\nself = "{addr}"\npeers = [{peers}]\npeer_timeout_ms = 10000\n'
    if near_bytes is not None:
        text += f"near_cache_bytes = {near_bytes}\n"
    return text


class Daemon:
    """`cogfeed serve --config` with the given datasets {name: [urls]}; defaults otherwise."""

    def __init__(self, workdir, datasets, capacity_bytes=2 << 30, extra_toml="", cache_toml=""):
        self.dir = Path(workdir)
        self.cache_extra = cache_toml
        self.datasets = datasets
        self.capacity = capacity_bytes
        self.extra = extra_toml
        self.port = self.metrics_port = None
        self.proc = None

    def config(self):
        lines = ["[server]", f'listen = "127.0.0.1:{self.port}"',
                 f'metrics_listen = "127.0.0.1:{self.metrics_port}"', "",
                 "[cache]", f"capacity_bytes = {self.capacity}",
                 # Every fresh daemon plans its STAC datasets again: cold means cold.
                 'index_dir = ""', self.cache_extra, "", self.extra]
        for name, urls in self.datasets.items():
            lines += ["[[datasets]]", f"name = {toml_str(name)}",
                      "scenes = [" + ", ".join(toml_str(u) for u in urls) + "]", ""]
        return "\n".join(lines)

    def start(self, timeout=120.0):
        self.port, self.metrics_port = self.port or free_port(), free_port()
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "cogfeed.toml"
        cfg.write_text(self.config())
        self.stderr = open(self.dir / "cogfeed.log", "ab")
        exe = binary("cogfeed")
        self.binary_mtime = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(exe)))
        self.proc = subprocess.Popen([exe, "serve", "--config", str(cfg)],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr, preexec_fn=die_with_parent,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn")))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cogfeed exited with {self.proc.returncode}; see {self.dir}/cogfeed.log")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        self.address = f"127.0.0.1:{self.port}"
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("cogfeed not ready in time")

    def metrics(self):
        """{metric name: summed value} and {(name, labels): value} from /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        total, detail = {}, {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not m:
                continue
            name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
            total[name] = total.get(name, 0.0) + value
            detail[(name, labels)] = value
        return total, detail

    def cpu(self):
        return cpu_seconds(self.proc.pid) if self.proc else 0.0

    def faults(self):
        return minor_faults(self.proc.pid) if self.proc else 0

    def stop(self):
        stop(self.proc)
        if getattr(self, "stderr", None):
            self.stderr.close()
