"""The zero-copy Batch decoder agrees with the generated protobuf parser."""

import numpy as np

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
        meta, image, lab, windows = decode_batch(raw)
        assert meta == {"epoch": 3, "index": 7, "cursor": 99, "batches_in_epoch": 12}
        assert image.dtype == np_dtype and np.array_equal(image, arr)
        assert np.array_equal(lab, label)
        assert windows.tolist() == [[1, 2, 3, 4, 5, 0], [300, 1 << 40, 0, 256, 256, 1]]


def test_zero_copy_and_no_label():
    arr = np.arange(4 * 64 * 64, dtype=np.uint16).reshape(1, 4, 64, 64)
    raw = make("uint16", arr)
    _, image, lab, _ = decode_batch(raw)
    assert lab is None
    if image.flags.aligned:
        assert image.base is not None and not image.flags.owndata
