"""Zero-copy decoding of `cogfeed.v1.Batch` messages.

The stream is received as raw message bytes and only the small fields are parsed here; the
tensor payloads become numpy arrays over the received bytes object itself (`np.frombuffer`
with an offset). This skips protobuf's copy of every payload: measured, it is the largest
per-byte cost left in Python after the network. The layout is the protobuf wire format of
`proto/cogfeed/v1/feed.proto`; the tests compare it with the generated parser.

Windows become one int64 row each: scene, col, row, width, height, level, padded (1 when part
of the window lies outside the scene and was filled, else 0). A batch may hold fewer than
batch_size samples (none at all included) when the server skipped unreadable ones; those are
listed as `SkippedSample`s.
"""

from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from ._tensor import numpy_dtype
from .v1 import feed_pb2 as pb


#: Columns of a windows array.
WINDOW_COLUMNS = ("scene", "col", "row", "width", "height", "level", "padded")


class SkippedSample(NamedTuple):
    """A sample the server left out of its batch (`on_corrupt="skip"`)."""

    sample: int  # global position of the sample in the epoch
    window: Tuple[int, ...]  # a windows row: scene, col, row, width, height, level, padded
    reason: str  # "corrupt" (a tile does not decode) or "missing" (an object is gone)


class SampleMeta(NamedTuple):
    """What one sample of a map-space (STAC) dataset is: `cogfeed warp` with these items,
    CRS, bounds and a layer's assets, resolution and kernel reproduces the layer."""

    items: Tuple[str, ...]  # item ids in mosaic priority order
    datetime: Optional[str]  # the drawn item's datetime (RFC 3339), None when it has none
    crs: str  # EPSG:<code>
    bounds: Tuple[float, float, float, float]  # minx, miny, maxx, maxy in crs
    resolution: float  # reference layer pixel size
    padded: bool
    drawn: str = ""  # the item whose grid the sample was planned on (the sampler's draw)
    #: share of the reference layer's pixels holding valid data (None when not assembled)
    valid_fraction: Optional[float] = None
    split: str = ""  # the split whose cells hold the footprint ("" when it straddles)
    #: time layers: {layer: (day or "" per step, oldest first)}
    datetimes: Dict[str, Tuple[str, ...]] = {}
    point_id: str = ""  # the points sampler: the point's id
    targets: Dict[str, float] = {}  # the points sampler: the point's numeric attributes
    dataset: str = ""  # mixtures: the dataset the sample came from
    #: layers with `harmonize` (Sentinel-2 L2A): {layer: (what was added to each step's valid
    #: pixels: -1000, 0 or +1000, oldest first; one step for a layer without time)}
    harmonized_offset: Dict[str, Tuple[int, ...]] = {}


def window_row(w):
    """A `Window` message as a windows row (see WINDOW_COLUMNS)."""
    return (w.scene, w.col, w.row, w.width, w.height, w.level, int(w.padded))


def _varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, start, end):
    """Yields (field number, wire type, value or (offset, length)) over buf[start:end]."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield field, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield field, wire, (pos, length)
            pos += length
        elif wire == 1:
            yield field, wire, buf[pos:pos + 8]
            pos += 8
        elif wire == 5:
            yield field, wire, buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _tensor(raw, view, start, end):
    dtype, shape, data = "", [], (0, 0)
    for field, wire, value in _fields(view, start, end):
        if field == 1:
            dtype = bytes(view[value[0]:value[0] + value[1]]).decode()
        elif field == 2 and wire == 2:
            pos, stop = value[0], value[0] + value[1]
            while pos < stop:
                d, pos = _varint(view, pos)
                shape.append(d)
        elif field == 2:
            shape.append(value)
        elif field == 3:
            data = value
    dt = numpy_dtype(dtype)
    count = data[1] // dt.itemsize
    array = np.frombuffer(raw, dtype=dt, count=count, offset=data[0])
    if not array.flags.aligned:
        # Rare: the payload does not start on the element size; one copy makes it aligned.
        array = array.copy()
    return array.reshape(tuple(shape))


def _named_tensor(raw, view, start, end):
    name, tensor = "", None
    for field, _, value in _fields(view, start, end):
        if field == 1:
            name = bytes(view[value[0]:value[0] + value[1]]).decode()
        elif field == 2:
            tensor = _tensor(raw, view, value[0], value[0] + value[1])
    return name, tensor


def decode_batch(raw):
    """(fields dict, image [B, C, H, W], label [B, H, W] or None, windows [B, 7] int64, list of
    `SkippedSample`) of a serialized Batch. B may be below batch_size, or 0. For map-space
    datasets the fields dict also holds "layers" ({name: [B, C, H_l, W_l]}, request order; the
    first is `image` itself, named by the batch's `image_layer`)
    and "samples" (a `SampleMeta` per sample); both are empty otherwise."""
    view = memoryview(raw)
    meta = {"epoch": 0, "index": 0, "cursor": 0, "batches_in_epoch": 0, "layers": {}, "samples": [],
            "time_masks": {}, "targets": {}, "dataset_version": ""}
    image = label = image_layer = None
    windows, skipped = [], []
    names = {1: "epoch", 2: "index", 3: "cursor", 7: "batches_in_epoch"}
    for field, wire, value in _fields(view, 0, len(view)):
        if field in names and wire == 0:
            meta[names[field]] = value
        elif field == 4:
            image = _tensor(raw, view, value[0], value[0] + value[1])
        elif field == 5:
            label = _tensor(raw, view, value[0], value[0] + value[1])
        elif field == 6:
            windows.append(window_row(pb.Window.FromString(bytes(view[value[0]:value[0] + value[1]]))))
        elif field == 8:
            s = pb.SkippedSample.FromString(bytes(view[value[0]:value[0] + value[1]]))
            skipped.append(SkippedSample(s.sample, window_row(s.window), s.reason))
        elif field == 9:
            name, tensor = _named_tensor(raw, view, value[0], value[0] + value[1])
            meta["layers"][name] = tensor
        elif field == 11:
            image_layer = bytes(view[value[0]:value[0] + value[1]]).decode()
        elif field == 10:
            m = pb.SampleInfo.FromString(bytes(view[value[0]:value[0] + value[1]]))
            meta["samples"].append(SampleMeta(
                tuple(m.items), m.datetime or None, m.crs, tuple(m.bounds), m.resolution, m.padded, m.drawn,
                m.valid_fraction if m.HasField("valid_fraction") else None, m.split,
                {d.layer: tuple(d.dates) for d in m.datetimes}, m.point_id, dict(m.targets), m.dataset,
                {o.layer: tuple(o.offsets) for o in m.harmonized_offset}))
        elif field == 12:
            name, tensor = _named_tensor(raw, view, value[0], value[0] + value[1])
            meta["time_masks"][name] = tensor
        elif field == 13:
            name, tensor = _named_tensor(raw, view, value[0], value[0] + value[1])
            meta["targets"][name] = tensor
        elif field == 14:
            meta["dataset_version"] = bytes(view[value[0]:value[0] + value[1]]).decode()
    if image is None:
        raise ValueError("batch without image")
    if image_layer:
        # The first layer travels in `image`; the others follow in request order.
        meta["layers"] = {image_layer: image, **meta["layers"]}
    columns = len(WINDOW_COLUMNS)
    return meta, image, label, np.array(windows, dtype=np.int64).reshape(-1, columns), skipped
