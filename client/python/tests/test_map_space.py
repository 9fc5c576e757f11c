"""Map-space (STAC) samples through the Python client and the torch dataset, against the
daemon's embedded `demo-stac` dataset (two UTM zones, per-band assets at 10 and 20 m, labels in
EPSG:4326): layers by name, sample metadata, determinism and resume."""

import numpy as np
import pytest

import cogfeed
from conftest import requires_torch


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
    assert isinstance(batch["image"], torch.Tensor) and tuple(batch["swir"].shape) == (2, 1, 16, 16)
    assert len(batch["meta"]) == 2
