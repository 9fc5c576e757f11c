"""`Client.read` / `Client.read_many` (ReadFootprint) against the real daemon's map-space demo
datasets: a streamed sample's `meta` read back gives the same bytes in every layer and the same
`SampleMeta`, in the order the footprints were given; the dict form (bounds + crs) reads a
footprint of its own; bad input raises a `CogfeedError` naming what is wrong, never a crash."""

import time

import numpy as np
import pytest

import cogfeed


def streamed(address, dataset, n=6, batch_size=3, seed=7, **kw):
    """`n` samples of a stream: [(batch, i)] with their batches."""
    loader = cogfeed.Loader(address, dataset, patch_size=32, batch_size=batch_size,
                            max_batches=n // batch_size, seed=seed, **kw)
    return [(b, i) for b in loader for i in range(len(b.meta))]


def assert_same_sample(read, j, batch, i):
    """Sample j of `read` is sample i of `batch`: every layer's bytes, dtype and shape, every
    time mask, the metadata."""
    assert list(read.layers) == list(batch.layers)
    for name, a in read.layers.items():
        b = batch.layers[name]
        assert a.dtype == b.dtype and a.shape[1:] == b.shape[1:], name
        assert a[j].tobytes() == b[i].tobytes(), f"layer {name} differs"
    assert read.image[j].tobytes() == batch.image[i].tobytes()
    assert list(read.time_masks) == list(batch.time_masks)
    for name, m in read.time_masks.items():
        assert m[j].tobytes() == batch.time_masks[name][i].tobytes()
    assert read.meta[j] == batch.meta[i]


def test_streamed_samples_read_back_byte_for_byte_in_order(daemon):
    samples = streamed(daemon.address, "demo-stac")
    assert len(samples) == 6
    metas = [b.meta[i] for b, i in samples]
    with cogfeed.Client(daemon.address) as c:
        read = c.read_many("demo-stac", metas)
        assert len(read.meta) == 6 and read.image.shape[0] == 6
        for j, (b, i) in enumerate(samples):
            assert_same_sample(read, j, b, i)
        # Reversed footprints come back reversed: results are in the order asked.
        back = c.read_many("demo-stac", metas[::-1])
        for j, (b, i) in enumerate(samples[::-1]):
            assert_same_sample(back, j, b, i)
        # One at a time, and with a subset of layers in another order.
        b, i = samples[2]
        one = c.read("demo-stac", metas[2].bounds, metas[2].crs, datetime=metas[2].datetime,
                      item=metas[2].drawn)
        assert_same_sample(one, 0, b, i)
        sub = c.read_many("demo-stac", [metas[4]], layers=["label", "swir"])
        assert list(sub.layers) == ["label", "swir"]
        b, i = samples[4]
        assert sub["label"][0].tobytes() == b["label"][i].tobytes()
        assert sub["swir"][0].tobytes() == b["swir"][i].tobytes()
        assert sub.image is sub["label"], "the first layer asked travels in image"


def test_time_series_samples_read_back_with_masks(daemon):
    samples = streamed(daemon.address, "demo-series", n=4, batch_size=2, seed=2)
    with cogfeed.Client(daemon.address) as c:
        read = c.read_many("demo-series", [b.meta[i] for b, i in samples])
    assert read["s2"].ndim == 5 and list(read.time_masks) == ["s2", "s1_asc", "s1_desc"]
    for j, (b, i) in enumerate(samples):
        assert_same_sample(read, j, b, i)
        assert read.meta[j].datetimes and read.meta[j].valid_fraction is not None


def test_bounds_and_crs_dict_form(daemon):
    (b, i), *_ = streamed(daemon.address, "demo-stac", n=3)
    m = b.meta[i]
    with cogfeed.Client(daemon.address) as c:
        # The streamed bounds in their own CRS, as a plain dict: a footprint on that grid.
        got = c.read_many("demo-stac", [{"bounds": list(m.bounds), "crs": m.crs, "item": m.drawn}])
        assert got.meta[0].bounds == m.bounds and got.meta[0].crs == m.crs
        assert got["image"][0].tobytes() == b["image"][i].tobytes()
        # A footprint of its own: half the pixels at twice the pixel size, every layer scaled.
        x0, y0 = m.bounds[0], m.bounds[1]
        coarse = c.read("demo-stac", (x0, y0, x0 + 640, y0 + 640), m.crs, resolution=20.0)
        assert coarse["image"].shape == (1, 4, 32, 32) and coarse["swir"].shape == (1, 1, 16, 16)
        assert coarse.meta[0].resolution == 20.0 and coarse.meta[0].crs == m.crs
        assert coarse.meta[0].bounds == pytest.approx((x0, y0, x0 + 640, y0 + 640))
        # A datetime object is sent as RFC 3339 (naive = UTC).
        import datetime as dt

        when = dt.datetime.fromisoformat(m.datetime.replace("Z", "+00:00")).replace(tzinfo=None)
        dated = c.read("demo-stac", m.bounds, m.crs, datetime=when, item=m.drawn)
        assert dated.meta[0] == m


def test_bad_input_raises_clear_cogfeed_errors(daemon):
    (b, i), *_ = streamed(daemon.address, "demo-stac", n=3)
    m = b.meta[i]
    good = {"bounds": m.bounds, "crs": m.crs}
    with cogfeed.Client(daemon.address) as c:
        cases = [
            ("demo-stac", [{**good, "bbox": [0, 0, 1, 1]}], cogfeed.InvalidRequest, "unknown keys ['bbox']"),
            ("demo-stac", [{**good, "bounds": m.bounds[:3]}], cogfeed.InvalidRequest, "3 bounds"),
            ("demo-stac", [{"bounds": m.bounds}], cogfeed.InvalidRequest, "needs bounds and crs"),
            ("demo-stac", [{**good, "bounds": ["a", 1, 2, 3]}], cogfeed.InvalidRequest, "numbers"),
            ("demo-stac", [good, 42], cogfeed.InvalidRequest, "footprint 1: a dict"),
            ("demo-stac", [{**good, "crs": 32633}], cogfeed.InvalidRequest, "crs is a string"),
            ("nope", [good], cogfeed.NotFound, "nope"),
            ("demo-stac", [good, {**good, "crs": "EPSG:999999"}], cogfeed.InvalidRequest, "footprint 1"),
            ("demo-stac", [{**good, "bounds": (m.bounds[2], m.bounds[1], m.bounds[0], m.bounds[3])}],
             cogfeed.InvalidRequest, "minx < maxx"),
            ("demo-stac", [{**good, "datetime": "yesterday"}], cogfeed.InvalidRequest, "RFC 3339"),
            # Far away from every Item (in the same UTM zone): the daemon says it meets none.
            ("demo-stac", [{"bounds": (100000.0, 1000000.0, 100320.0, 1000320.0), "crs": m.crs}],
             cogfeed.InvalidRequest, "meet no item"),
            ("demo-stac", [{**good, "item": "no-such-item"}], cogfeed.NotFound, "footprint 0"),
            ("demo-stac", [good], cogfeed.InvalidRequest, "no layer"),  # with layers=["nope"] below
            ("demo-stac", [], cogfeed.InvalidRequest, "no footprints"),
            ("demo", [good], cogfeed.FailedPrecondition, "not a map-space dataset"),
        ]
        for k, (dataset, footprints, kind, text) in enumerate(cases):
            layers = ["nope"] if text == "no layer" else None
            with pytest.raises(kind) as e:
                c.read_many(dataset, footprints, layers=layers)
            assert isinstance(e.value, cogfeed.CogfeedError)
            assert text in str(e.value), (k, str(e.value))
            assert "/" not in e.value.details.replace("EPSG:", ""), f"a path in {e.value.details!r}"
        # The client is still usable afterwards.
        assert c.read_many("demo-stac", [m]).meta[0] == m


def test_read_latency(daemon, capsys):
    """The figure the docs quote: one footprint per call, warm, all layers (printed)."""
    samples = streamed(daemon.address, "demo-stac", n=12, batch_size=6)
    metas = [b.meta[i] for b, i in samples]
    with cogfeed.Client(daemon.address) as c:
        c.read_many("demo-stac", metas)  # warm the cache
        start = time.perf_counter()
        for m in metas:
            c.read_many("demo-stac", [m])
        single = (time.perf_counter() - start) / len(metas)
        start = time.perf_counter()
        c.read_many("demo-stac", metas)
        batched = (time.perf_counter() - start) / len(metas)
    with capsys.disabled():
        print(f"\nReadFootprint demo-stac 32x32, every layer: {single * 1e3:.2f} ms per call of one, "
              f"{batched * 1e3:.2f} ms per footprint in a call of {len(metas)}")
    assert np.isfinite(single) and single < 5.0


def run_read(rust_client, address, *args):
    import subprocess

    return subprocess.run([rust_client, "--server", address, "read", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_read_writes_npz_and_npy_equal_to_the_python_read(daemon, rust_client, tmp_path):
    import hashlib
    import json

    samples = streamed(daemon.address, "demo-series", n=2, batch_size=2, seed=3)
    b, i = samples[1]
    m = b.meta[i]
    bounds = ",".join(repr(v) for v in m.bounds)
    out = tmp_path / "fp.npz"
    r = run_read(rust_client, daemon.address, "--dataset", "demo-series", "--bounds", bounds, "--crs", m.crs,
                 "--datetime", m.datetime, "--item", m.drawn, "--out", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["written"] == str(out)
    assert report["sample"]["bounds"] == list(m.bounds) and report["sample"]["drawn"] == m.drawn
    assert report["sample"]["items"] == list(m.items) and report["sample"]["datetimes"]["s2"] == list(m.datetimes["s2"])
    files = np.load(out)
    assert sorted(files.files) == sorted([*b.layers, *(f"time_mask/{n}" for n in b.time_masks)])
    for name, layer in b.layers.items():
        assert files[name].dtype == layer.dtype and files[name].shape == layer.shape[1:], name
        assert files[name].tobytes() == layer[i].tobytes(), name
        assert report["layers"][name]["shape"] == list(layer.shape[1:])
        assert report["layers"][name]["sha256"] == hashlib.sha256(layer[i].tobytes()).hexdigest()
    for name, mask in b.time_masks.items():
        assert files[f"time_mask/{name}"].tolist() == mask[i].tolist() == report["time_masks"][name]
    # One layer to .npy; a summary alone without --out.
    npy = tmp_path / "label.npy"
    r = run_read(rust_client, daemon.address, "--dataset", "demo-series", "--bounds", bounds, "--crs", m.crs,
                 "--datetime", m.datetime, "--item", m.drawn, "--layers", "label", "--out", str(npy))
    assert r.returncode == 0, r.stderr
    assert np.load(npy).tobytes() == b["label"][i].tobytes() and np.load(npy).shape == b["label"].shape[1:]
    r = run_read(rust_client, daemon.address, "--dataset", "demo-series", "--bounds", bounds, "--crs", m.crs)
    assert r.returncode == 0, r.stderr
    assert "written" not in json.loads(r.stdout) and sorted(json.loads(r.stdout)["layers"]) == sorted(b.layers)


def test_cli_read_refuses_bad_input_in_one_line(daemon, rust_client, tmp_path):
    (b, i), *_ = streamed(daemon.address, "demo-stac", n=3)
    m = b.meta[i]
    bounds = ",".join(repr(v) for v in m.bounds)
    base = ["--dataset", "demo-stac", "--crs", m.crs]
    cases = [
        (["--bounds", "1,2,3", *base], "four numbers"),
        (["--bounds", bounds, *base, "--out", str(tmp_path / "x.tif")], "write a .npz or a .npy"),
        (["--bounds", bounds, *base, "--out", str(tmp_path / "x.npy")], "a .npy holds one layer"),
        (["--bounds", "100000,1000000,100320,1000320", *base], "meet no item"),
        (["--bounds", bounds, "--dataset", "nope", "--crs", m.crs], "nope"),
        (["--bounds", bounds, *base, "--datetime", "yesterday"], "RFC 3339"),
    ]
    for args, text in cases:
        r = run_read(rust_client, daemon.address, *args)
        assert r.returncode != 0, args
        assert text in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "panicked" not in r.stderr
    assert not (tmp_path / "x.npy").exists() and not (tmp_path / "x.tif").exists()
