"""Tokens, TLS and mTLS from the Python client against the real daemon: certificates from
`trustme`, the daemon started with `[auth]` and `[tls]` as an operator would write them."""

import hashlib
import re
import subprocess
import time

import grpc
import pytest

import cogfeed
from conftest import binary, free_port

trustme = pytest.importorskip("trustme")

TOKEN = "py-3c1f0e9a-secret"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert("trainer@example.com")
    paths = {}
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server.private_key_pem.write_to_path(str(d / "server-key.pem"))
    server.cert_chain_pems[0].write_to_path(str(d / "server.pem"))
    client.private_key_pem.write_to_path(str(d / "client-key.pem"))
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    for name in ["ca", "server", "server-key", "client", "client-key"]:
        paths[name] = str(d / f"{name}.pem")
    other = trustme.CA()
    other.cert_pem.write_to_path(str(d / "other-ca.pem"))
    paths["other-ca"] = str(d / "other-ca.pem")
    return paths


def start(config_text, tmp_path):
    port = free_port()
    cfg = tmp_path / "cogfeed.toml"
    cfg.write_text(config_text)
    proc = subprocess.Popen(
        [binary("cogfeed"), "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines = []
    deadline = time.time() + 60
    for line in proc.stderr:
        lines.append(line)
        if re.search(r"grpc listening on", line):
            return proc, f"127.0.0.1:{port}", "".join(lines)
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("daemon did not start:\n" + "".join(lines) + proc.stderr.read())


@pytest.fixture(scope="module")
def secure(pki, demo_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure")
    proc, address, log = start(f"""
[auth]
required = true
[[auth.tokens]]
sha256 = "{sha(TOKEN)}"
datasets = ["demo"]
[tls]
cert = "{pki['server']}"
key = "{pki['server-key']}"
client_ca = "{pki['ca']}"
[[datasets]]
name = "demo"
prefix = "{demo_dir}/"
labels = "{demo_dir}/labels/{{stem}}.tif"
""", tmp)
    yield address, log
    proc.terminate()
    proc.wait(10)


def mtls(pki, ca="ca"):
    return {"ca": pki[ca], "cert": pki["client"], "key": pki["client-key"]}


def test_token_and_mtls_let_a_loader_in(secure, pki):
    address, log = secure
    assert "WARNING: authentication is OFF" not in log
    assert "https://" in log
    loader = cogfeed.Loader(address, "demo", batch_size=4, samples_per_epoch=16, token=TOKEN, tls=mtls(pki))
    batches = list(loader)
    assert len(batches) == 4 and batches[0].image.shape == (4, 4, 256, 256)
    with cogfeed.Client(address, token=TOKEN, tls=mtls(pki)) as c:
        assert [d.name for d in c.datasets()] == ["demo"]


def test_missing_or_wrong_token_is_unauthenticated(secure, pki, monkeypatch):
    address, _ = secure
    monkeypatch.delenv("COGFEED_TOKEN", raising=False)
    for token in [None, "not-the-token"]:
        with cogfeed.Client(address, token=token, tls=mtls(pki)) as c:
            with pytest.raises(cogfeed.CogfeedError) as e:
                c.datasets()
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert TOKEN not in str(e.value)
    # The token from the environment.
    monkeypatch.setenv("COGFEED_TOKEN", TOKEN)
    with cogfeed.Client(address, tls=mtls(pki)) as c:
        assert len(c.datasets()) == 1


def test_tls_failures_are_clear(secure, pki):
    address, _ = secure
    cases = [
        {"ca": pki["ca"]},  # no client certificate on an mTLS server
        mtls(pki, ca="other-ca"),  # the server's certificate is not trusted
        None,  # plain HTTP/2 to a TLS port
    ]
    for tls in cases:
        loader = cogfeed.Loader(address, "demo", batch_size=4, samples_per_epoch=8, token=TOKEN, tls=tls,
                                reconnect_timeout=1.0)
        with pytest.raises(cogfeed.CogfeedError) as e:
            list(loader)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE, (tls, e.value)


def test_open_mode_warns_loudly(demo_dir, tmp_path):
    proc, address, log = start(f"""
[[datasets]]
name = "demo"
prefix = "{demo_dir}/"
""", tmp_path)
    try:
        assert "WARNING: authentication is OFF" in log
        with cogfeed.Client(address) as c:
            assert len(c.datasets()) == 1
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_token_and_ca(secure, pki):
    address, _ = secure
    base = [binary("cogfeed-client"), "--server", address, "--ca", pki["ca"], "--cert", pki["client"],
            "--key", pki["client-key"], "--tls-domain", "localhost"]
    ok = subprocess.run(base + ["--token", TOKEN, "datasets"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("demo"), ok.stderr
    denied = subprocess.run(base + ["--token", "nope", "datasets"], capture_output=True, text=True)
    assert denied.returncode != 0 and "nauthenticated" in denied.stderr, denied.stderr
    untrusted = subprocess.run(
        [binary("cogfeed-client"), "--server", address, "--ca", pki["other-ca"], "--token", TOKEN, "datasets"],
        capture_output=True, text=True)
    assert untrusted.returncode != 0 and "invalid peer certificate" in untrusted.stderr, untrusted.stderr
