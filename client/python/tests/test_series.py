"""Space-time samples through the Python client, on the daemon's embedded `demo-series`
dataset (Sentinel-2 dates with their SCL cloud mask, Sentinel-1 ascending and descending,
labels in EPSG:4326): time tensors and masks, valid fractions recomputed with numpy,
splits, and the torch dataset on a multi-sensor stream."""

import numpy as np
import pytest

import cogfeed
from conftest import requires_torch

INVALID = [0, 1, 3, 8, 9, 10]


def numpy_valid_fraction(s2, scl, present):
    """s2 [T, C, H, W] uint16 (nodata 0), scl [1, H/2, W/2] classes, present [T] bool."""
    mask = np.isin(scl[0], INVALID).repeat(2, axis=0).repeat(2, axis=1)  # each 20 m pixel covers 2 x 2
    data = (s2[present] != 0).any(axis=1)  # [T', H, W]
    if data.shape[0] == 0:
        return 0.0
    return float((data & ~mask[None]).sum() / data.size)


def test_time_series_masks_and_valid_fractions(daemon):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo-series")
        assert [l.name for l in info.layers] == ["s2", "scl", "s1_asc", "s1_desc", "label"]
    loader = cogfeed.Loader(daemon.address, "demo-series", patch_size=64, batch_size=4, samples_per_epoch=16,
                            seed=5, split="train")
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    for b in batches:
        assert b["s2"].shape == (4, 3, 4, 64, 64) and b["s2"].dtype == np.uint16
        assert b["s1_asc"].shape == (4, 2, 2, 32, 32)
        assert b["scl"].shape == (4, 1, 32, 32)
        assert b.time_masks["s2"].shape == (4, 3)
        for i, m in enumerate(b.meta):
            days = m.datetimes["s2"]
            present = np.array([d != "" for d in days])
            assert np.array_equal(b.time_masks["s2"][i].astype(bool), present)
            assert [d for d in days if d] == sorted(d for d in days if d)
            assert days[-1] == m.datetime[:10], "latest: the drawn date is the last step"
            assert m.split == "train"
            expected = numpy_valid_fraction(b["s2"][i], b["scl"][i], present)
            assert m.valid_fraction == pytest.approx(expected, abs=1e-12)
            assert m.valid_fraction >= 0.5
            # Missing steps are nodata.
            assert (b["s2"][i][~present] == 0).all()


def test_unknown_split_is_a_clear_error(daemon):
    with pytest.raises(cogfeed.CogfeedError, match="no split"):
        list(cogfeed.Loader(daemon.address, "demo-series", patch_size=32, batch_size=2, max_batches=1,
                            split="holdout"))
    with pytest.raises(cogfeed.CogfeedError, match="no \\[datasets.split\\]"):
        list(cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=2, max_batches=1, split="val"))


@requires_torch
def test_torch_dataset_yields_the_multi_sensor_tensors(daemon):
    import torch

    from cogfeed.torch import StreamDataset

    ds = StreamDataset(daemon.address, "demo-series", patch_size=32, batch_size=2, samples_per_epoch=4,
                       split="val", layers=["s2", "s1_desc", "label"])
    batches = list(ds)
    assert len(batches) == 2
    b = batches[0]
    layers = b["layers"]
    assert list(layers) == ["s2", "s1_desc", "label"]
    assert tuple(layers["s2"].shape) == (2, 3, 4, 32, 32)
    assert tuple(layers["s1_desc"].shape) == (2, 2, 2, 16, 16)
    assert tuple(layers["label"].shape) == (2, 1, 32, 32)
    assert isinstance(layers["s2"], torch.Tensor)
    masks = b["time_masks"]
    assert list(masks) == ["s2", "s1_desc"]
    assert masks["s2"].dtype == torch.bool and tuple(masks["s2"].shape) == (2, 3)


def test_points_sampler_delivers_the_points_attributes(daemon):
    import json
    import os

    loader = cogfeed.Loader(daemon.address, "demo-series", sampler="points", patch_size=32, batch_size=8,
                            layers=["label"])
    batches = list(loader)
    assert len(batches) == len(loader) > 0
    ids = [m.point_id for b in batches for m in b.meta]
    assert len(ids) == len(set(ids)), "each point once per epoch"
    points = {f["id"]: f["properties"] for f in json.load(open(os.path.join(daemon.data_dir, "series", "points.geojson")))["features"]}
    for b in batches:
        assert sorted(b.targets) == ["biomass", "crop", "irrigated"]
        for i, m in enumerate(b.meta):
            p = points[m.point_id]
            assert b.targets["crop"][i] == p["crop"] == m.targets["crop"]
            assert b.targets["biomass"][i] == pytest.approx(p["biomass"])
            assert b.targets["irrigated"][i] == float(p["irrigated"])


def test_balanced_sampler_draws_the_rare_class_at_its_target(daemon):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo-series")
    assert info.balance_layer == "label"
    shares = {s.class_value: s for s in info.balance}
    assert shares[6].natural < 0.05 and shares[6].target == pytest.approx(0.2)

    def class_shares(sampler):
        loader = cogfeed.Loader(daemon.address, "demo-series", sampler=sampler, patch_size=32, batch_size=16,
                                samples_per_epoch=160, seed=9, layers=["label"])
        labels = np.concatenate([b["label"].ravel() for b in loader])
        labels = labels[labels != 255]
        return {k: float((labels == k).mean()) for k in shares}

    balanced, drawn_randomly = class_shares("balanced"), class_shares("random")
    for k, s in shares.items():
        assert abs(balanced[k] - s.expected) < 0.07, (k, balanced, s)
    assert balanced[6] > 0.1 > drawn_randomly[6]


def test_a_mixture_draws_each_dataset_by_weight(daemon):
    loader = cogfeed.Loader(daemon.address, mixture={"demo-stac": 3, "demo-series": 1}, patch_size=32,
                            batch_size=8, samples_per_epoch=64, seed=2, layers=["label"])
    batches = list(loader)
    assert len(batches) == len(loader) == 8
    names = [m.dataset for b in batches for m in b.meta]
    for k in range(0, 64, 4):  # 3 : 1 in every period of 4
        assert sorted(names[k:k + 4]) == ["demo-series", "demo-stac", "demo-stac", "demo-stac"]
    assert all(b["label"].shape == (8, 1, 32, 32) for b in batches)
    with pytest.raises(TypeError):
        cogfeed.Loader(daemon.address, "demo-stac", mixture={"demo-series": 1})
    with pytest.raises(cogfeed.CogfeedError, match="different layers"):
        list(cogfeed.Loader(daemon.address, mixture={"demo-stac": 1, "demo-series": 1}, patch_size=32,
                            batch_size=4, max_batches=1))
