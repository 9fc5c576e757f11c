"""Failures by kind, from the real daemon: each status it sends surfaces as its
`CogfeedError` subclass, which is also the builtin a caller would catch (`LookupError`,
`ValueError`, `PermissionError`, `ConnectionError`), from every public call and also when
a stream fails in the middle; never as a raw `grpc.RpcError`."""

import time
import hashlib
import pickle
import shutil
import struct

import grpc
import pytest

import cogfeed
from cogfeed._errors import error_class
from cogfeed.v1 import feed_pb2 as pb
from conftest import Daemon, free_port, requires_torch

TOKEN = "errors-7d2c41-secret"


def raised(kind, builtin, fn):
    """The error `fn()` raises: a `kind` (with kind's code), a `builtin`, a CogfeedError,
    not a grpc.RpcError."""
    with pytest.raises(kind) as e:
        fn()
    err = e.value
    assert isinstance(err, builtin) and isinstance(err, cogfeed.CogfeedError), type(err).__mro__
    assert not isinstance(err, grpc.RpcError)
    assert err.code == kind.grpc_code and str(err) == f"{err.code.name}: {err.details}"
    return err


def drain(iterable):
    """Iterates to the end or the first error: (items seen, the error or None)."""
    n = 0
    try:
        for _ in iterable:
            n += 1
    except cogfeed.CogfeedError as e:
        return n, e
    return n, None


def request(dataset, **fields):
    return pb.StreamBatchesRequest(**{"dataset": dataset, "sampler": pb.SAMPLER_ALIGNED, "patch_size": 256,
                                      "batch_size": 1, **fields})


def test_every_status_has_its_kind():
    kinds = {
        "INVALID_ARGUMENT": (cogfeed.InvalidRequest, ValueError), "OUT_OF_RANGE": (cogfeed.OutOfRange, ValueError),
        "NOT_FOUND": (cogfeed.NotFound, LookupError),
        "PERMISSION_DENIED": (cogfeed.PermissionDenied, PermissionError),
        "UNAUTHENTICATED": (cogfeed.Unauthenticated, PermissionError),
        "UNAVAILABLE": (cogfeed.Unavailable, ConnectionError),
        "DEADLINE_EXCEEDED": (cogfeed.DeadlineExceeded, TimeoutError),
        "RESOURCE_EXHAUSTED": (cogfeed.ResourceExhausted, cogfeed.CogfeedError),
        "FAILED_PRECONDITION": (cogfeed.FailedPrecondition, cogfeed.CogfeedError),
        "DATA_LOSS": (cogfeed.DataLoss, cogfeed.CogfeedError), "CANCELLED": (cogfeed.Cancelled, cogfeed.CogfeedError),
        "INTERNAL": (cogfeed.InternalError, cogfeed.CogfeedError),
        "UNKNOWN": (cogfeed.InternalError, cogfeed.CogfeedError),
        "UNIMPLEMENTED": (cogfeed.InternalError, cogfeed.CogfeedError),
    }
    for code in grpc.StatusCode:
        kind, builtin = kinds.get(code.name, (cogfeed.CogfeedError, cogfeed.CogfeedError))
        cls = error_class(code)
        assert cls is kind and issubclass(cls, builtin), code
        err = cls(code, "dataset x: why")
        assert (err.code, err.details, str(err)) == (code, "dataset x: why", f"{code.name}: dataset x: why")
        # Pickled whole (multiprocessing), and built from a message alone (torch's DataLoader
        # re-raises a worker's exception as `type(e)(text)`).
        back = pickle.loads(pickle.dumps(err))
        assert (type(back), back.code, back.details) == (cls, code, "dataset x: why")
        assert cls("text").details == "text"
    assert issubclass(cogfeed.Unauthenticated, cogfeed.PermissionDenied)
    assert set(cogfeed.__all__) >= {k.__name__ for k, _ in kinds.values()}


def test_an_unknown_dataset_is_not_found_from_every_call(daemon):
    calls = []
    with cogfeed.Client(daemon.address) as c:
        calls += [
            lambda: c.describe("nope"),
            lambda: c.count(request("nope")),
            lambda: c.read_window("nope", 0, 0, 0, 8, 8),
            lambda: next(iter(c.stream(request("nope")))),
            lambda: next(iter(c.stream_raw(request("nope")))),
            lambda: list(cogfeed.Loader(c, "nope")),
            lambda: len(cogfeed.Loader(daemon.address, "nope")),
            lambda: next(iter(cogfeed.Loader(daemon.address, "nope"))),
        ]
        for fn in calls:
            err = raised(cogfeed.NotFound, LookupError, fn)
            assert "nope" in err.details
    # What a caller writes without knowing cogfeed's classes.
    try:
        list(cogfeed.Loader(daemon.address, "nope"))
    except LookupError as e:
        assert e.code == grpc.StatusCode.NOT_FOUND


def test_bad_requests_are_invalid_requests(daemon):
    err = raised(cogfeed.InvalidRequest, ValueError, lambda: list(cogfeed.Loader(daemon.address, "demo", batch_size=0)))
    assert "batch_size" in err.details
    with cogfeed.Client(daemon.address) as c:
        err = raised(cogfeed.InvalidRequest, ValueError, lambda: c.read_window("demo", 99, 0, 0, 8, 8))
        assert "scene 99" in err.details
        raised(cogfeed.InvalidRequest, ValueError, lambda: next(iter(c.stream(request("demo", batch_size=0)))))
    # Checked before anything is sent.
    raised(cogfeed.InvalidRequest, ValueError, lambda: cogfeed.Loader(daemon.address, "demo", sampler="tiled"))


def test_what_the_data_cannot_serve_is_a_failed_precondition(daemon):
    with cogfeed.Client(daemon.address) as c:
        err = raised(cogfeed.FailedPrecondition, cogfeed.CogfeedError,
                     lambda: c.read_window("demo-stac", 0, 0, 0, 8, 8))
        assert "map-space" in err.details


def test_a_daemon_that_is_not_listening_is_unavailable():
    dead = f"127.0.0.1:{free_port()}"
    with cogfeed.Client(dead) as c:
        raised(cogfeed.Unavailable, ConnectionError, c.datasets)
        raised(cogfeed.Unavailable, ConnectionError, lambda: next(iter(c.stream(request("demo")))))
    raised(cogfeed.Unavailable, ConnectionError, lambda: len(cogfeed.Loader(dead, "demo")))
    loader = cogfeed.Loader(dead, "demo", reconnect_timeout=0.3)
    raised(cogfeed.Unavailable, ConnectionError, lambda: list(iter(loader)))
    assert loader.reconnects >= 1, "the loader retried before giving up"


@pytest.fixture(scope="module")
def auth_daemon(demo_dir, tmp_path_factory):
    """Tokens required; TOKEN may read "demo" only, one stream at a time; "demo2" exists."""
    cfg = tmp_path_factory.mktemp("auth") / "cogfeed.toml"
    cfg.write_text(f"""
[auth]
required = true
[[auth.tokens]]
sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
datasets = ["demo"]
max_streams = 1
[[datasets]]
name = "demo"
prefix = "{demo_dir}/"
[[datasets]]
name = "demo2"
prefix = "{demo_dir}/"
""")
    d = Daemon(config=cfg).start()
    yield d
    d.stop()


def test_no_token_or_another_dataset_is_permission_denied(auth_daemon, monkeypatch):
    monkeypatch.delenv("COGFEED_TOKEN", raising=False)
    address = auth_daemon.address
    for token in (None, "not-the-token"):
        with cogfeed.Client(address, token=token) as c:
            err = raised(cogfeed.Unauthenticated, PermissionError, c.datasets)
            assert isinstance(err, cogfeed.PermissionDenied) and TOKEN not in str(err)
        raised(cogfeed.Unauthenticated, PermissionError,
               lambda: list(cogfeed.Loader(address, "demo", token=token, max_batches=1)))
    # A valid token, a dataset it may not read.
    err = raised(cogfeed.PermissionDenied, PermissionError,
                 lambda: list(cogfeed.Loader(address, "demo2", token=TOKEN, max_batches=1)))
    assert not isinstance(err, cogfeed.Unauthenticated) and "demo2" in err.details


def test_a_second_stream_over_the_tokens_limit_is_resource_exhausted_and_a_cancel_cancelled(auth_daemon):
    with cogfeed.Client(auth_daemon.address, token=TOKEN) as c:
        first = c.stream(request("demo"))
        assert next(first).image.shape == [1, 4, 256, 256]
        err = raised(cogfeed.ResourceExhausted, cogfeed.CogfeedError,
                     lambda: list(cogfeed.Loader(auth_daemon.address, "demo", token=TOKEN, max_batches=1)))
        assert "stream" in err.details
        assert first.cancel()
        raised(cogfeed.Cancelled, cogfeed.CogfeedError, lambda: list(first))
        # The slot is free again once the daemon has seen the cancel (it arrives asynchronously).
        deadline = time.monotonic() + 10
        while True:
            try:
                assert len(list(cogfeed.Loader(auth_daemon.address, "demo", token=TOKEN, max_batches=1))) == 1
                break
            except cogfeed.ResourceExhausted:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def tile_range(path, tile):
    """(offset, length) of full-resolution tile `tile` of a little-endian TIFF or BigTIFF."""
    data = path.read_bytes()
    assert data[:2] == b"II", "demo files are little-endian"
    big = struct.unpack_from("<H", data, 2)[0] == 43
    if big:
        ifd = struct.unpack_from("<Q", data, 8)[0]
        count, entry_at, entry_size = struct.unpack_from("<Q", data, ifd)[0], ifd + 8, 20
    else:
        ifd = struct.unpack_from("<I", data, 4)[0]
        count, entry_at, entry_size = struct.unpack_from("<H", data, ifd)[0], ifd + 2, 12
    sizes = {3: ("H", 2), 4: ("I", 4), 16: ("Q", 8)}
    values = {}
    for i in range(count):
        at = entry_at + i * entry_size
        if big:
            tag, typ, n = struct.unpack_from("<HHQ", data, at)
            inline, value_at = 8, at + 12
        else:
            tag, typ, n = struct.unpack_from("<HHI", data, at)
            inline, value_at = 4, at + 8
        if tag in (324, 325):
            fmt, size = sizes[typ]
            if n * size > inline:
                value_at = struct.unpack_from("<Q" if big else "<I", data, value_at)[0]
            values[tag] = struct.unpack_from(f"<{n}{fmt}", data, value_at)
    return values[324][tile], values[325][tile]


@pytest.fixture(scope="module")
def broken_daemon(demo_dir, tmp_path_factory):
    """Dataset "broken": one demo scene whose full-resolution tile 5 is garbage."""
    d = tmp_path_factory.mktemp("broken")
    path = d / "broken.tif"
    shutil.copy(demo_dir / "scene_00.tif", path)
    offset, length = tile_range(path, 5)
    with open(path, "r+b") as f:
        f.seek(offset + 4)
        f.write(b"\x55" * (length - 4))
    cfg = d / "cogfeed.toml"
    cfg.write_text(f"""
[[datasets]]
name = "broken"
scenes = ["{path}"]
""")
    daemon = Daemon(config=cfg).start()
    yield daemon
    daemon.stop()


def broken_loader(address, seed, on_corrupt="fail"):
    return cogfeed.Loader(address, "broken", sampler="aligned", batch_size=1, prefetch=1, seed=seed,
                          on_corrupt=on_corrupt)


def test_a_stream_that_fails_in_the_middle_raises_data_loss(broken_daemon):
    address = broken_daemon.address
    # A seed whose permutation reaches the corrupt window after some good ones.
    seed = next(s for s in range(8) if drain(broken_loader(address, s))[0] > 0)
    n, err = drain(broken_loader(address, seed))
    assert 0 < n < 16 and isinstance(err, cogfeed.DataLoss), (n, err)
    assert "broken.tif" in err.details and "tile 5" in err.details
    with cogfeed.Client(address) as c:
        stream = c.stream(broken_loader(address, seed).request())
        assert drain(stream)[0] == n
        raised(cogfeed.DataLoss, cogfeed.CogfeedError, lambda: list(c.stream(broken_loader(address, seed).request())))
    # on_corrupt="skip" instead: the same window is left out, nothing raised.
    skipping = list(broken_loader(address, seed, on_corrupt="skip"))
    assert len(skipping) == 16 and sum(len(b.skipped) for b in skipping) == 1


def test_a_daemon_gone_in_the_middle_of_a_stream_is_unavailable(fresh_daemon):
    many = dict(sampler="random", patch_size=64, batch_size=4, samples_per_epoch=1 << 20)
    with cogfeed.Client(fresh_daemon.address) as c:
        stream = c.stream(cogfeed.Loader(c, "demo", **many).request())
        next(stream)
        fresh_daemon.kill()
        n, err = drain(stream)
        assert isinstance(err, cogfeed.Unavailable) and isinstance(err, ConnectionError), (n, err)
    fresh_daemon.start()
    # A Loader rides it out for reconnect_timeout, then raises the same kind.
    loader = cogfeed.Loader(fresh_daemon.address, "demo", reconnect_timeout=0.5, **many)
    it = iter(loader)
    next(it)
    fresh_daemon.kill()
    n, err = drain(it)
    assert isinstance(err, cogfeed.Unavailable), (n, err)
    assert loader.reconnects >= 1


@requires_torch
def test_torch_streams_raise_the_same_kinds(daemon, broken_daemon):
    from torch.utils.data import DataLoader

    from cogfeed.torch import StreamDataset

    raised(cogfeed.NotFound, LookupError, lambda: next(iter(StreamDataset(daemon.address, "nope"))))
    seed = next(s for s in range(8) if drain(broken_loader(broken_daemon.address, s))[0] > 0)
    ds = StreamDataset(broken_daemon.address, "broken", sampler="aligned", batch_size=1, prefetch=1, seed=seed,
                       on_corrupt="fail")
    n, err = drain(ds)
    assert n > 0 and isinstance(err, cogfeed.DataLoss), (n, err)
    # From a DataLoader worker process: torch re-raises it in the training process, same kind.
    workers = DataLoader(StreamDataset(daemon.address, "nope"), batch_size=None, num_workers=1,
                         multiprocessing_context="spawn")
    err = raised(cogfeed.NotFound, LookupError, lambda: next(iter(workers)))
    assert "nope" in str(err)
