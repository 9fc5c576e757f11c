"""`cogfeed.torchgeo` against the real daemon's map-space demos, with torchgeo's own samplers,
`stack_samples`, `IntersectionDataset` and DataLoader workers: the index is the Items of
`DescribeDataset`, a sample is what `Client.read` gives for the query, workers open their own
channels (spawned and forked), and the streaming `CogfeedStreamDataset` yields the same dict
layout. Skipped where torchgeo is not importable (it needs Python >= 3.12; `.ci/test` runs
this file in a venv that has it)."""

import os
import time

import numpy as np
import pytest

import cogfeed

torchgeo = pytest.importorskip("torchgeo")
import pandas as pd  # noqa: E402 - torchgeo's dependencies, there when it is
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchgeo.datasets import stack_samples  # noqa: E402
from torchgeo.samplers import GridGeoSampler, GriddedPatchSampler, RandomGeoSampler, RandomPatchSampler  # noqa: E402

from cogfeed.torchgeo import CogfeedDataset, CogfeedStreamDataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

KEYS = {"image", "mask", "bounds", "transform"}


def test_index_is_the_items_of_describe(daemon):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo-series")
    ds = CogfeedDataset(daemon.address, "demo-series", layers=["s2"], mask="label")
    assert len(ds) == len(info.scenes) and list(ds.index["item"]) == [s.name for s in info.scenes]
    crss = [s.crs for s in info.scenes]
    assert ds.crs.to_epsg() == int(max(dict.fromkeys(crss), key=crss.count).split(":")[1])
    assert ds.res == (10.0, 10.0)
    for s, interval in zip(info.scenes, ds.index.index):
        assert s.datetime, "a demo Item has a datetime"
        when = pd.Timestamp(s.datetime).tz_convert("UTC").tz_localize(None)
        assert interval.left == interval.right == when
    x, y, t = ds.bounds
    assert x.start < x.stop and y.start < y.stop and t.start <= t.stop
    with pytest.raises(cogfeed.InvalidRequest, match="share one resolution"):
        CogfeedDataset(daemon.address, "demo-stac", layers=["image", "swir"])
    with pytest.raises(cogfeed.InvalidRequest, match="no layer 'nope'"):
        CogfeedDataset(daemon.address, "demo-stac", layers=["nope"])
    with pytest.raises(cogfeed.NotFound):
        CogfeedDataset(daemon.address, "no-such-dataset")


def test_a_query_is_the_read_of_its_footprint(daemon):
    ds = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], mask="label")
    row = ds.index.iloc[0]
    minx, miny, _, _ = row.geometry.bounds
    x0, y0 = minx + 1000.0, miny + 1000.0
    interval = ds.index.index[0]
    sample = ds[x0:x0 + 320.0, y0:y0 + 320.0, interval.left:interval.right]
    assert set(sample) == KEYS
    assert sample["image"].dtype == torch.float32 and tuple(sample["image"].shape) == (4, 32, 32)
    assert sample["mask"].dtype == torch.int64 and tuple(sample["mask"].shape) == (32, 32)
    with cogfeed.Client(daemon.address) as c:
        ref = c.read("demo-stac", (x0, y0, x0 + 320.0, y0 + 320.0), f"EPSG:{ds.crs.to_epsg()}",
                     datetime=interval.right.to_pydatetime(), layers=["image", "label"])
    assert np.array_equal(sample["image"].numpy(), ref["image"][0].astype(np.float32))
    assert np.array_equal(sample["mask"].numpy(), ref["label"][0, 0].astype(np.int64))
    b = sample["bounds"].tolist()
    assert b[:6] == pytest.approx([x0, x0 + 320.0, 10.0, y0, y0 + 320.0, 10.0])
    assert b[6] == interval.left.timestamp() and b[7] == interval.right.timestamp()
    assert sample["transform"].tolist() == pytest.approx([10.0, 0, x0, 0, -10.0, y0 + 320.0, 0, 0, 1])
    # Outside every Item: torchgeo's IndexError.
    with pytest.raises(IndexError):
        ds[1e7:1e7 + 320.0, 1e7:1e7 + 320.0]
    # A DataLoader batch is one call; queries of two shapes, which one call cannot stack, one each.
    small, big = ds.__getitems__([(slice(x0, x0 + 320.0), slice(y0, y0 + 320.0)),
                                  (slice(x0, x0 + 640.0), slice(y0, y0 + 640.0))])
    assert tuple(small["image"].shape) == (4, 32, 32) and tuple(big["image"].shape) == (4, 64, 64)
    assert torch.equal(small["image"], ds[x0:x0 + 320.0, y0:y0 + 320.0]["image"])


def test_another_crs_reprojects_the_index_and_the_reads(daemon):
    native = CogfeedDataset(daemon.address, "demo-stac", layers=["image"])
    other = next(s.crs for s in native.info.scenes if s.crs != f"EPSG:{native.crs.to_epsg()}")
    ds = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], crs=other, res=20.0)
    assert f"EPSG:{ds.crs.to_epsg()}" == other and ds.res == (20.0, 20.0)
    (q,) = list(RandomGeoSampler(ds, size=16, length=1, generator=torch.Generator().manual_seed(2)))
    sample = ds[q]
    assert tuple(sample["image"].shape) == (4, 16, 16) and sample["bounds"][2].item() == 20.0


def test_samplers_and_dataloader_workers(daemon):
    ds = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], mask="label")
    for sampler in (RandomGeoSampler(ds, size=32, length=8), RandomPatchSampler(ds, size=32, length=8)):
        loader = DataLoader(ds, sampler=sampler, batch_size=4, collate_fn=stack_samples)
        batches = list(loader)
        assert len(batches) == 2
        for b in batches:
            assert set(b) == KEYS and tuple(b["image"].shape) == (4, 4, 32, 32)
            assert tuple(b["mask"].shape) == (4, 32, 32) and tuple(b["bounds"].shape) == (4, 9)
    grid = GridGeoSampler(ds, size=64, stride=64)
    n = len(grid)
    assert n > 0
    chips = [ds[q] for q in list(grid)[:6]]
    assert all(tuple(c["image"].shape) == (4, 64, 64) for c in chips)
    gridded = GriddedPatchSampler(ds, size=64, stride=64)
    assert tuple(ds[next(iter(gridded))]["image"].shape) == (4, 64, 64)
    # Workers, spawned and forked from a parent that has read through the same dataset (its
    # client and channel open): each worker reads through a channel of its own, and the
    # samples are those read in the parent.
    pids = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], transforms=_with_pid)
    queries = list(RandomGeoSampler(pids, size=32, length=8, generator=torch.Generator().manual_seed(1)))
    expected = [pids[q]["image"] for q in queries]
    for context in ("spawn", "fork"):
        loader = DataLoader(pids, sampler=queries, batch_size=2, num_workers=2, collate_fn=stack_samples,
                            multiprocessing_context=context, timeout=120)
        got = list(loader)
        assert torch.equal(torch.cat([b["image"] for b in got]), torch.stack(expected)), context
        workers = {int(p) for b in got for p in b["pid"]}
        assert len(workers) == 2 and os.getpid() not in workers, context


def _with_pid(sample):
    """A transform run in the worker: which process read the sample, and through which client."""
    from cogfeed.torchgeo import _LazyClient  # noqa: F401 - the worker imported it

    sample["pid"] = torch.tensor(os.getpid())
    return sample


def test_intersection_with_a_coarser_layer(daemon):
    image = CogfeedDataset(daemon.address, "demo-stac", layers=["image"])
    swir = CogfeedDataset(daemon.address, "demo-stac", layers=["swir"])
    assert swir.res == (20.0, 20.0)
    both = image & swir
    (q,) = list(RandomGeoSampler(both, size=32, length=1, generator=torch.Generator().manual_seed(3)))
    s = both[q]
    # The intersection reads swir on the image's 10 m grid: 4 + 1 channels of 32 x 32.
    assert tuple(s["image"].shape) == (5, 32, 32)


def test_stream_dataset_yields_the_same_layout(daemon):
    stream = CogfeedStreamDataset(daemon.address, "demo-stac", layers=["image"], mask="label", patch_size=32,
                                  batch_size=4, max_batches=2, seed=4)
    batches = list(DataLoader(stream, batch_size=4, collate_fn=stack_samples))
    assert len(batches) == 2
    (raw,) = list(cogfeed.Loader(daemon.address, "demo-stac", layers=["image", "label"], patch_size=32,
                                 batch_size=4, max_batches=1, seed=4))
    first = batches[0]
    assert set(first) == KEYS and first["image"].dtype == torch.float32 and first["mask"].dtype == torch.int64
    assert tuple(first["image"].shape) == (4, 4, 32, 32) and tuple(first["mask"].shape) == (4, 32, 32)
    for i, m in enumerate(raw.meta):
        assert np.array_equal(first["image"][i].numpy(), raw["image"][i].astype(np.float32))
        assert first["bounds"][i, [0, 3, 1, 4]].tolist() == pytest.approx(list(m.bounds))
        assert first["bounds"][i, 2].item() == 10.0
        when = pd.Timestamp(m.datetime).timestamp()
        assert first["bounds"][i, 6].item() == first["bounds"][i, 7].item() == when


def test_throughput_random_access_vs_stream(daemon):
    """The figures the docs quote (printed): samples/s in the test process through a DataLoader
    of the GeoDataset (RandomGeoSampler, batches of 16 read in one call each) and of the
    stream, 64 x 64, image + mask, warm."""
    n = 256
    ds = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], mask="label")
    rates = {}
    for name in ("warm-up", "geo"):
        sampler = RandomGeoSampler(ds, size=64, length=n, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        got = sum(len(b["image"]) for b in DataLoader(ds, sampler=sampler, batch_size=16, collate_fn=stack_samples))
        rates[name] = got / (time.perf_counter() - start)
    stream = CogfeedStreamDataset(daemon.address, "demo-stac", layers=["image"], mask="label", patch_size=64,
                                  batch_size=16, samples_per_epoch=n, seed=0)
    start = time.perf_counter()
    streamed = sum(len(b["image"]) for b in DataLoader(stream, batch_size=16, collate_fn=stack_samples))
    rate = streamed / (time.perf_counter() - start)
    print(f"\ntorchgeo demo-stac 64x64 image+mask, no workers: GeoDataset + RandomGeoSampler {rates['geo']:.0f} "
          f"samples/s, CogfeedStreamDataset {rate:.0f} samples/s")
    assert got == n and streamed == n


def test_the_sampler_path_and_the_stream_give_the_same_pixels_for_the_same_footprints(daemon):
    """Streamed samples' footprints (in the dataset's CRS), asked through torchgeo's query
    (bounds and the drawn Item's instant), are the streamed samples, pixel for pixel."""
    ds = CogfeedDataset(daemon.address, "demo-stac", layers=["image"], mask="label")
    epsg = f"EPSG:{ds.crs.to_epsg()}"
    checked = 0
    for raw in cogfeed.Loader(daemon.address, "demo-stac", layers=["image", "label"], patch_size=32,
                              batch_size=8, max_batches=3, seed=11):
        for i, m in enumerate(raw.meta):
            if m.crs != epsg:
                continue
            minx, miny, maxx, maxy = m.bounds
            when = pd.Timestamp(m.datetime)
            sample = ds[minx:maxx, miny:maxy, when:when]
            assert np.array_equal(sample["image"].numpy(), raw["image"][i].astype(np.float32)), f"sample {i}"
            assert np.array_equal(sample["mask"].numpy(), raw["label"][i, 0].astype(np.int64)), f"sample {i}"
            checked += 1
    assert checked >= 4, checked
