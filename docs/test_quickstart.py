"""Runs every command of the quick start (docs/src/guide/quick-start.md) and of the README.

Each fenced ``sh`` block of those two files is preceded by a marker comment:

    <!-- quickstart: daemon -->   the block is the command that starts the daemon
    <!-- quickstart: run -->      every command in it is run against that daemon
    <!-- quickstart: skip (why) --> shown, not run (the test suite itself, installs)

An unmarked ``sh`` block fails a test, so a new command cannot slip past it.

The commands run as documented, with three substitutions that keep them off the user's
ports and files: ``cargo run --release --bin NAME --`` becomes the binary
``$CARGO_TARGET_DIR/release/NAME`` (``.ci/test`` builds them first; ``COGFEED_BIN_DIR``
overrides), the daemon gets ``--listen``/``--metrics-listen`` on free loopback ports and
``--data-dir`` in a temporary folder, and ``127.0.0.1:50051``, ``127.0.0.1:9464`` and
``~/.local/share/cogfeed/demo`` in the commands are replaced by those. Client commands also
get ``COGFEED_SERVER``. URLs of the metrics listener named in a block's comments (the
status page) are fetched. Every command must exit 0 and print (or write) something that
looks like what the page says it does.

Run: ``python3 -m pytest -q docs/test_quickstart.py`` from the repository root.
"""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "docs" / "src" / "guide" / "quick-start.md", ROOT / "README.md"]
DEFAULT_GRPC = "127.0.0.1:50051"
DEFAULT_METRICS = "127.0.0.1:9464"
DEFAULT_DATA = "~/.local/share/cogfeed/demo"
MARKER = re.compile(r"<!--\s*quickstart:\s*(daemon|run|skip)\b[^>]*-->\s*\n```sh\n(.*?)```", re.S)
CARGO_RUN = re.compile(r"^cargo run --release --bin (\S+) -- ")


def blocks(page):
    """(kind, text) of every marked sh block of a page."""
    return [(m.group(1), m.group(2)) for m in MARKER.finditer(page.read_text())]


def unmarked(page):
    """Line numbers of the sh blocks of a page that have no marker."""
    text = page.read_text()
    starts = {m.start(2) for m in MARKER.finditer(text)}
    return [text[:m.end()].count("\n") for m in re.finditer(r"```sh\n", text) if m.end() not in starts]


def commands(body):
    """The commands of a block (continuation lines joined) and the comment lines."""
    cmds, comments, current = [], [], ""
    for line in body.splitlines():
        if not current and line.lstrip().startswith("#"):
            comments.append(line)
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            if current.strip():
                cmds.append(re.sub(r"\s+", " ", current.strip()))
            current = ""
    return cmds, comments


def documented():
    """Every documented command, in page order, without repeats: (daemon, runs, urls)."""
    daemon, runs, urls = set(), [], []
    for page in PAGES:
        for kind, body in blocks(page):
            cmds, comments = commands(body)
            if kind == "daemon":
                daemon.update(cmds)
            elif kind == "run":
                runs += [c for c in cmds if c not in runs]
                for c in comments:
                    urls += [u for u in re.findall(r"http://127\.0\.0\.1:9464/\S*", c) if u not in urls]
    return daemon, runs, urls


def bin_dir():
    dirs = [os.environ.get("COGFEED_BIN_DIR")]
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(os.path.join(os.environ["CARGO_TARGET_DIR"], "release"))
    dirs.append(str(ROOT / "target" / "release"))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "cogfeed")) and os.path.exists(os.path.join(d, "cogfeed-client")):
            return d
    pytest.fail("cogfeed and cogfeed-client are not built: run `cargo build --release --bins` first")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local(cmd, bins, grpc, metrics, data):
    """The documented command with the test's binaries, ports and data folder."""
    m = CARGO_RUN.match(cmd)
    if m:
        cmd = shlex.quote(os.path.join(bins, m.group(1))) + " " + cmd[m.end():]
    return (cmd.replace(DEFAULT_GRPC, grpc).replace(DEFAULT_METRICS, metrics)
            .replace(DEFAULT_DATA, shlex.quote(str(data))))


DAEMON, RUNS, URLS = documented()


def test_pages_mark_every_block_and_show_the_commands():
    for page in PAGES:
        assert not unmarked(page), (
            f"{page.relative_to(ROOT)}: the sh blocks at lines {unmarked(page)} have no "
            "<!-- quickstart: daemon|run|skip --> marker")
    assert DAEMON == {"cargo run --release --bin cogfeed -- serve"}, DAEMON
    assert len(RUNS) >= 10, RUNS
    assert any(" datasets" in c for c in RUNS) and any(" stream " in c for c in RUNS)
    # The README's client commands are the quick start's (the README may show fewer).
    readme_runs = [c for kind, body in blocks(ROOT / "README.md") if kind == "run" for c in commands(body)[0]]
    quick_runs = [c for kind, body in blocks(PAGES[0]) if kind == "run" for c in commands(body)[0]]
    assert set(readme_runs) <= set(quick_runs), set(readme_runs) - set(quick_runs)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    bins = bin_dir()
    data = tmp_path_factory.mktemp("demo")
    grpc, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    (cmd,) = DAEMON
    argv = shlex.split(local(cmd, bins, grpc, metrics, data)) + [
        "--listen", grpc, "--metrics-listen", metrics, "--data-dir", str(data)]
    log = open(data.parent / "daemon.log", "w+")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=data.parent)
    deadline = time.time() + 180
    while True:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"the daemon exited with {proc.returncode}:\n{log.read()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://{metrics}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            proc.kill()
            pytest.fail("the daemon was not ready in 180 s")
        time.sleep(0.2)
    yield dict(bins=bins, data=data, grpc=grpc, metrics=metrics, cwd=tmp_path_factory.mktemp("work"))
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def check_output(cmd, out, cwd):
    """What the quick start says each command gives."""
    words = shlex.split(cmd)
    if os.path.basename(words[0]).startswith("python"):
        assert out.strip(), "printed nothing"
        return
    tool, sub = os.path.basename(words[0]), words[1]
    if sub == "datasets":
        for name in ("demo", "demo-stac", "demo-series"):
            assert re.search(rf"\b{name}\b", out), f"{name} not listed:\n{out}"
    elif sub == "describe":
        assert words[2] in out, out
    elif sub == "stream" and "--jsonl" in words:
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert lines and all("cursor" in b for b in lines), out[:2000]
        if "--max-batches" in words:
            assert len(lines) == int(words[words.index("--max-batches") + 1]), out[:2000]
    elif sub == "bench":
        report = json.loads(out.strip().splitlines()[-1])
        assert report["batches"] > 0 and report["mb_per_s"] > 0, out
    if "--out" in words:
        pattern = words[words.index("--out") + 1].replace("{scene}", "*")
        files = sorted(cwd.glob(pattern)) or sorted(cwd.glob(pattern.replace(".png", "*.png")))
        assert files, f"{pattern} was not written"
        magic = {".npy": b"\x93NUMPY", ".png": b"\x89PNG", ".tif": b"II*\x00"}
        for f in files:
            head = f.read_bytes()[:8]
            assert head.startswith(magic.get(f.suffix, b"")) and f.stat().st_size > 64, f
    elif sub not in ("datasets", "describe", "stream", "bench"):
        assert out.strip(), f"{tool} {sub} printed nothing"


@pytest.mark.parametrize("cmd", RUNS, ids=[re.sub(r"^cargo run --release --bin ", "", c)[:70] for c in RUNS])
def test_documented_command(daemon, cmd):
    line = local(cmd, daemon["bins"], daemon["grpc"], daemon["metrics"], daemon["data"])
    env = dict(os.environ, COGFEED_SERVER=daemon["grpc"])
    for var in ("COGFEED_TOKEN", "COGFEED_CA", "COGFEED_CERT", "COGFEED_KEY"):
        env.pop(var, None)
    if shlex.split(line)[0] == "python3":
        line = shlex.quote(sys.executable) + line[len("python3"):]
    r = subprocess.run(["bash", "-c", line], cwd=daemon["cwd"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{cmd}\nexit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    check_output(line, r.stdout, daemon["cwd"])


@pytest.mark.parametrize("url", URLS)
def test_documented_page(daemon, url):
    with urllib.request.urlopen(url.replace(DEFAULT_METRICS, daemon["metrics"]), timeout=30) as r:
        body = r.read().decode()
    assert r.status == 200 and "<html" in body.lower() and "demo-stac" in body, body[:2000]
