"""Map-space (STAC) samples through the Python client and the torch dataset, against the
daemon's embedded `demo-stac` dataset (two UTM zones, per-band assets at 10 and 20 m, labels in
EPSG:4326): layers by name, sample metadata, determinism and resume; and layers named like the
batch's own fields ("meta", "windows", "image", "layers"), which never take their place."""

import numpy as np
import pytest

import cogfeed
from conftest import Daemon, requires_torch


def test_batches_carry_named_layers_and_sample_metadata(daemon):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo-stac")
        assert [l.name for l in info.layers] == ["image", "swir", "label"]
        assert info.crs == "native"
    loader = cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=4, max_batches=2, seed=3)
    batches = list(loader)
    assert len(batches) == 2
    for b in batches:
        assert b["image"].shape == (4, 4, 32, 32) and b["image"].dtype == np.uint16
        assert b["swir"].shape == (4, 1, 16, 16)
        assert b["label"].shape == (4, 1, 32, 32) and b["label"].dtype == np.uint8
        assert np.array_equal(b.image, b["image"])  # older code reading .image gets the reference layer
        assert len(b.meta) == 4
        for m in b.meta:
            assert m.crs in ("EPSG:32632", "EPSG:32633")
            assert m.bounds[2] - m.bounds[0] == pytest.approx(320.0)
            assert m.resolution == 10.0 and m.items
        with pytest.raises(KeyError, match="nope"):
            b["nope"]
    again = list(cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=4, max_batches=2, seed=3))
    assert all(np.array_equal(a["image"], b["image"]) for a, b in zip(batches, again))


def test_describe_gives_each_items_grid_and_times(daemon):
    """Map-space scenes are the drawable Items: name = Item id, the reference grid, and the
    Item's datetime (a time index, what cogfeed.torchgeo builds its index from)."""
    with cogfeed.Client(daemon.address) as c:
        scenes = c.describe("demo-stac").scenes
        streamed = next(iter(cogfeed.Loader(c, "demo-stac", patch_size=32, batch_size=4, max_batches=1, seed=2)))
    by_id = {s.name: s for s in scenes}
    for m in streamed.meta:
        s = by_id[m.drawn]
        assert s.datetime == m.datetime and s.crs == m.crs and len(s.geotransform) == 6
        assert s.start_datetime == s.end_datetime == ""


def test_layer_subset_and_resume(daemon):
    full = list(cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=2, samples_per_epoch=12,
                               layers=["swir"]))
    assert len(full) == 6 and list(full[0].layers) == ["swir"]
    rest = list(cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=2, samples_per_epoch=12,
                               layers=["swir"], cursor=full[2].cursor))
    assert [b["swir"].tobytes() for b in rest] == [b["swir"].tobytes() for b in full[3:]]


@requires_torch
def test_torch_dataset_yields_tensors_by_layer(daemon):
    import torch

    from cogfeed.torch import StreamDataset

    ds = StreamDataset(daemon.address, "demo-stac", patch_size=32, batch_size=2, max_batches=1, seed=1)
    (batch,) = list(ds)
    layers = batch["layers"]
    assert list(layers) == ["image", "swir", "label"]
    assert isinstance(batch["image"], torch.Tensor) and tuple(layers["swir"].shape) == (2, 1, 16, 16)
    assert torch.equal(batch["image"], layers["image"])  # the reference layer
    assert tuple(layers["label"].shape) == (2, 1, 32, 32) and layers["label"].dtype == torch.uint8
    assert batch["label"] is None, "a layer named label is in layers, not the scene label's key"
    assert len(batch["meta"]) == 2


@pytest.fixture(scope="module")
def clash_daemon(demo_dir, tmp_path_factory):
    """Dataset "clash", over the demo-series Items, whose layers are named like the batch's
    fixed keys: "meta" (the reference layer, 2 dates), "windows", "image", "layers"."""
    cfg = tmp_path_factory.mktemp("clash") / "cogfeed.toml"
    cfg.write_text(f"""
[[datasets]]
name = "clash"
stac = "{demo_dir}/series/items.json"
crs = "native"

[[datasets.layers]]
name = "meta"
assets = ["B02", "B03", "B04", "B08"]
resolution = 10
time_steps = 2
filter = {{ collections = ["sentinel-2-l2a-series"] }}

[[datasets.layers]]
name = "windows"
assets = ["classes"]
resolution = 10
resampling = "mode"
nodata = 255

[[datasets.layers]]
name = "image"
assets = ["SCL"]
resolution = 20
filter = {{ collections = ["sentinel-2-l2a-series"] }}

[[datasets.layers]]
name = "layers"
assets = ["vv"]
resolution = 20
filter = {{ collections = ["sentinel-1-rtc-series"] }}
""")
    d = Daemon(config=cfg).start()
    yield d
    d.stop()


def test_layers_named_like_fixed_fields_do_not_collide(clash_daemon):
    (b,) = list(cogfeed.Loader(clash_daemon.address, "clash", patch_size=32, batch_size=3, max_batches=1, seed=4))
    assert list(b.layers) == ["meta", "windows", "image", "layers"]
    assert b.layers["meta"].shape == (3, 2, 4, 32, 32) and b["meta"] is b.layers["meta"]
    assert b.windows.shape == (3, 7) and b.layers["windows"].shape == (3, 1, 32, 32)
    assert len(b.meta) == 3 and all(isinstance(m, cogfeed.SampleMeta) for m in b.meta)
    # `image` is the reference layer (as for every map-space batch); the layer called image is its own.
    assert np.array_equal(b.image, b.layers["meta"]) and b.layers["image"].shape == (3, 1, 16, 16)
    assert list(b.time_masks) == ["meta"] and b.time_masks["meta"].shape == (3, 2)


@requires_torch
def test_torch_batches_keep_named_things_apart_from_fixed_keys(clash_daemon):
    import torch

    from cogfeed.torch import KEYS, StreamDataset

    ds = StreamDataset(clash_daemon.address, "clash", patch_size=32, batch_size=3, max_batches=1, seed=4)
    (batch,) = list(ds)
    assert tuple(batch) == KEYS
    layers = batch["layers"]
    assert list(layers) == ["meta", "windows", "image", "layers"]
    assert tuple(layers["meta"].shape) == (3, 2, 4, 32, 32) and layers["meta"].dtype == torch.uint16
    assert tuple(layers["windows"].shape) == (3, 1, 32, 32) and layers["windows"].dtype == torch.uint8
    assert tuple(layers["image"].shape) == (3, 1, 16, 16) and tuple(layers["layers"].shape) == (3, 1, 16, 16)
    # The fixed keys keep their meaning.
    assert len(batch["meta"]) == 3 and all(isinstance(m, cogfeed.SampleMeta) for m in batch["meta"])
    assert batch["windows"].dtype == torch.int64 and tuple(batch["windows"].shape) == (3, 7)
    assert torch.equal(batch["image"], layers["meta"]) and batch["label"] is None
    assert list(batch["time_masks"]) == ["meta"] and batch["time_masks"]["meta"].dtype == torch.bool
    assert batch["targets"] == {}
