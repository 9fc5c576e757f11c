"""The zero-copy Batch decoder agrees with the generated protobuf parser."""

import numpy as np

from cogfeed import SkippedSample
from cogfeed._wire import decode_batch
from cogfeed.v1 import feed_pb2 as pb


def make(dtype, arr, label=None):
    b = pb.Batch(epoch=3, index=7, cursor=99, batches_in_epoch=12,
                 image=pb.Tensor(dtype=dtype, shape=list(arr.shape), data=arr.tobytes()))
    if label is not None:
        b.label.CopyFrom(pb.Tensor(dtype="uint8", shape=list(label.shape), data=label.tobytes()))
    b.windows.add(scene=1, col=2, row=3, width=4, height=5, level=0, padded=True)
    b.windows.add(scene=300, col=1 << 40, row=0, width=256, height=256, level=1)
    return b.SerializeToString()


def test_matches_protobuf():
    rng = np.random.default_rng(0)
    for dtype, np_dtype in [("uint16", np.uint16), ("float32", np.float32), ("uint8", np.uint8), ("float64", np.float64)]:
        arr = (rng.random((2, 3, 5, 7)) * 100).astype(np_dtype)
        label = (rng.random((2, 5, 7)) * 8).astype(np.uint8)
        raw = make(dtype, arr, label)
        meta, image, lab, windows, skipped = decode_batch(raw)
        assert meta == {"epoch": 3, "index": 7, "cursor": 99, "batches_in_epoch": 12, "layers": {}, "samples": [],
                        "time_masks": {}, "targets": {}, "dataset_version": ""}
        assert image.dtype == np_dtype and np.array_equal(image, arr)
        assert np.array_equal(lab, label)
        # The 7th column is Window.padded.
        assert windows.tolist() == [[1, 2, 3, 4, 5, 0, 1], [300, 1 << 40, 0, 256, 256, 1, 0]]
        assert skipped == []


def test_zero_copy_and_no_label():
    arr = np.arange(4 * 64 * 64, dtype=np.uint16).reshape(1, 4, 64, 64)
    raw = make("uint16", arr)
    _, image, lab, _, _ = decode_batch(raw)
    assert lab is None
    if image.flags.aligned:
        assert image.base is not None and not image.flags.owndata


def skipping_batch(n, skipped):
    """A Batch of n samples of [2, 3, 4] uint16 from which `skipped` samples were left out."""
    arr = np.arange(n * 2 * 3 * 4, dtype=np.uint16).reshape(n, 2, 3, 4)
    label = np.zeros((n, 3, 4), dtype=np.uint8)
    b = pb.Batch(epoch=1, index=2, cursor=40,
                 image=pb.Tensor(dtype="uint16", shape=list(arr.shape), data=arr.tobytes()),
                 label=pb.Tensor(dtype="uint8", shape=list(label.shape), data=label.tobytes()))
    for i in range(n):
        b.windows.add(scene=0, col=4 * i, row=0, width=4, height=3)
    for i in range(skipped):
        b.skipped.add(sample=30 + i, window=pb.Window(scene=2, col=i, row=5, width=4, height=3, padded=i == 0),
                      reason="corrupt" if i else "missing")
    return arr, b


def test_a_batch_with_skipped_samples():
    arr, b = skipping_batch(3, 2)
    meta, image, label, windows, skipped = decode_batch(b.SerializeToString())
    assert image.shape == (3, 2, 3, 4) and np.array_equal(image, arr) and label.shape == (3, 3, 4)
    assert windows.shape == (3, 7) and windows[:, 1].tolist() == [0, 4, 8]
    assert skipped == [SkippedSample(30, (2, 0, 5, 4, 3, 0, 1), "missing"),
                       SkippedSample(31, (2, 1, 5, 4, 3, 0, 0), "corrupt")]
    assert skipped[1].reason == "corrupt" and skipped[1].window[0] == 2


def test_a_batch_with_no_sample_left():
    _, b = skipping_batch(0, 4)
    raw = b.SerializeToString()
    assert pb.Batch.FromString(raw).image.data == b""
    meta, image, label, windows, skipped = decode_batch(raw)
    assert meta["cursor"] == 40
    assert image.shape == (0, 2, 3, 4) and image.dtype == np.uint16
    assert label.shape == (0, 3, 4) and label.dtype == np.uint8
    assert windows.shape == (0, 7) and windows.dtype == np.int64
    assert [s.sample for s in skipped] == [30, 31, 32, 33]


def test_layers_and_sample_metadata_decode_like_protobuf():
    """Map-space batches: one tensor per layer by name, in order, and a SampleInfo per sample."""
    image = np.arange(2 * 4 * 3 * 3, dtype=np.uint16).reshape(2, 4, 3, 3)
    swir = np.arange(2 * 1 * 2 * 2, dtype=np.uint16).reshape(2, 1, 2, 2)
    b = pb.Batch(epoch=1, index=0, cursor=2)
    b.image.CopyFrom(pb.Tensor(dtype="uint16", shape=list(image.shape), data=image.tobytes()))
    b.image_layer = "image"
    b.layers.add(name="swir", tensor=pb.Tensor(dtype="uint16", shape=list(swir.shape), data=swir.tobytes()))
    b.samples.add(items=["A", "B"], datetime="2024-06-03T10:18:21+00:00", crs="EPSG:32633",
                  bounds=[1.0, 2.0, 3.0, 4.0], resolution=10.0, padded=False)
    b.samples.add(items=["A"], crs="EPSG:32632", bounds=[5.0, 6.0, 7.0, 8.0], resolution=10.0, padded=True)
    meta, img, _, _, _ = decode_batch(b.SerializeToString())
    assert list(meta["layers"]) == ["image", "swir"]
    assert np.array_equal(meta["layers"]["swir"], swir) and np.array_equal(img, image)
    first, second = meta["samples"]
    assert first.items == ("A", "B") and first.crs == "EPSG:32633" and first.bounds == (1.0, 2.0, 3.0, 4.0)
    assert second.datetime is None and second.padded
