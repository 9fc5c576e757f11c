"""torchgeo integration: a map-space dataset as a torchgeo `GeoDataset` read through
`ReadFootprint`, and an `IterableDataset` of the same samples from the stream.

`CogfeedDataset(address, dataset, layers=..., mask=...)` is a `torchgeo.datasets.GeoDataset`
(torchgeo 0.10): its `index` is a GeoDataFrame of the dataset's Items (each drawable Item's
reference grid from `DescribeDataset`, reprojected into the dataset's `crs`), indexed by
their time ranges (`pd.IntervalIndex`, closed on both sides; an Item without a datetime spans
all time). `ds[xmin:xmax:xres, ymin:ymax:yres, tmin:tmax]` — what torchgeo's samplers
yield, a tuple of two or three slices, steps optional — reads that footprint in `crs` at
`xres` with `ReadFootprint`. Its datetime is the latest Item datetime among the index rows
the query meets (capped at `tmax`): a sampler that drew an Item's interval gets that Item's
date, and a time layer ends there. So `RandomGeoSampler`, `GridGeoSampler`,
`RandomPatchSampler`, `GriddedPatchSampler`, `IntersectionDataset` (which may change `crs`
and `res`) and `stack_samples` work unchanged.

A sample is a dict of tensors in torchgeo's conventions:

- `image`: the `layers`, concatenated on the channel axis, `[C, H, W]` (`[T, C, H, W]` for
  time layers), cast to `dtype` (float32 by default, as torchgeo's `RasterDataset`);
- `mask`: the `mask` layer, int64, `[H, W]` (its one band squeezed; `[T, H, W]` for a time
  layer), when a mask layer is named;
- `bounds`: float64 `[xmin, xmax, xres, ymin, ymax, yres, tmin, tmax, tres]` (what
  `GeoDataset._slice_to_tensor` gives), x/y the pixels' real extent (the daemon snaps bounds
  in an Item's own CRS to its pixel edges), t in POSIX seconds;
- `transform`: the affine transform of those pixels, 9 float64 values (rasterio's order).

The CRS is the dataset's (`ds.crs`, a pyproj CRS). All layers of one `CogfeedDataset` share
one resolution (one grid): read a layer at another resolution as another `CogfeedDataset`
and join them with `&`.

Workers: a DataLoader's workers each open their own channel. The client is made lazily, in
the process that reads, and a client inherited through `fork` is never used (its process id
is checked); pickling (spawn, forkserver) drops it. The parent's one gRPC call, the
`DescribeDataset` at construction, is made before any worker exists.

`CogfeedStreamDataset(address, dataset, layers=..., mask=..., **loader_args)` is an
`IterableDataset` over `cogfeed.torch.StreamDataset` (ranks, workers, resume as there) that
yields the same per-sample dicts, so `DataLoader(..., batch_size=B, collate_fn=stack_samples)`
batches either. Its bounds are in each sample's own CRS (`SampleMeta.crs`: one CRS unless
the dataset's `crs` is `native` and its Items are in several).

torchgeo (and so Python 3.12) is needed for this module only: `pip install torchgeo`.
"""

import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._client import Client
from ._errors import InvalidRequest
from .v1 import feed_pb2 as pb

try:
    import geopandas as gpd
    import pandas as pd
    import pyproj
    import shapely
    import torch
    from torchgeo.datasets import GeoDataset
except ImportError as e:  # pragma: no cover - exercised only where torchgeo is missing
    raise ImportError("cogfeed.torchgeo needs torchgeo (Python >= 3.12): pip install torchgeo") from e

from .torch import StreamDataset


def _time(value: str) -> Optional["pd.Timestamp"]:
    """An RFC 3339 datetime as a naive UTC Timestamp (torchgeo's index is naive)."""
    if not value:
        return None
    t = pd.Timestamp(value)
    return t.tz_convert("UTC").tz_localize(None) if t.tzinfo is not None else t


def _grid_box(scene: pb.SceneInfo) -> Tuple[float, float, float, float]:
    """A scene's reference grid extent (minx, miny, maxx, maxy) in its CRS."""
    x0, dx, rx, y0, ry, dy = scene.geotransform
    w, h = scene.levels[0].width, scene.levels[0].height
    xs = [x0, x0 + dx * w, x0 + rx * h, x0 + dx * w + rx * h]
    ys = [y0, y0 + ry * w, y0 + dy * h, y0 + ry * w + dy * h]
    return min(xs), min(ys), max(xs), max(ys)


def _combine(arrays: Sequence[Tuple[str, np.ndarray]], what: str) -> np.ndarray:
    """Layers concatenated on the channel axis (-3), refused when their other axes differ."""
    first_name, first = arrays[0]
    for name, a in arrays[1:]:
        if a.ndim != first.ndim or a.shape[:-3] != first.shape[:-3] or a.shape[-2:] != first.shape[-2:]:
            raise InvalidRequest(f"{what}: layer {name} is {list(a.shape)}, layer {first_name} "
                                 f"{list(first.shape)}: one tensor needs one grid (and one time axis)")
    return first if len(arrays) == 1 else np.concatenate([a for _, a in arrays], axis=-3)


def _sample(layers: Dict[str, np.ndarray], image: Sequence[str], mask: Optional[str], dtype: "torch.dtype",
            bounds: Sequence[float], res: Tuple[float, float], times: Tuple[float, float],
            what: str) -> Dict[str, "torch.Tensor"]:
    """The torchgeo sample dict of one sample's layers (each without the batch axis)."""
    out: Dict[str, torch.Tensor] = {}
    if image:
        # numpy casts (torch has few ops for uint16/uint32), then the tensor's own dtype.
        via = np.float64 if dtype == torch.float64 else np.float32 if dtype.is_floating_point else np.int64
        combined = _combine([(n, layers[n]) for n in image], what)
        out["image"] = torch.from_numpy(combined.astype(via)).to(dtype)
    if mask is not None:
        m = layers[mask]
        if m.shape[-3] == 1:
            m = m[..., 0, :, :]
        out["mask"] = torch.from_numpy(m.astype(np.int64))
    minx, miny, maxx, maxy = bounds
    out["bounds"] = torch.tensor([minx, maxx, res[0], miny, maxy, res[1], times[0], times[1], 1.0],
                                 dtype=torch.float64)
    out["transform"] = torch.tensor([res[0], 0.0, minx, 0.0, -res[1], maxy, 0.0, 0.0, 1.0], dtype=torch.float64)
    return out


def _check_layers(info: pb.DatasetInfo, layers: Sequence[str], mask: Optional[str]) -> float:
    """The layers' one resolution; unknown layers or mixed resolutions raise."""
    known = {l.name: l for l in info.layers}
    if not known:
        raise InvalidRequest(f"dataset {info.name} is not a map-space dataset")
    names = list(layers) + ([mask] if mask is not None else [])
    if not names:
        raise InvalidRequest("give layers (for image) or a mask layer")
    for n in names:
        if n not in known:
            raise InvalidRequest(f"dataset {info.name} has no layer {n!r} (layers: {', '.join(known)})")
    if len(set(names)) != len(names):
        raise InvalidRequest(f"a layer is named twice in {names}")
    res = {known[n].resolution for n in names}
    if len(res) > 1:
        by = ", ".join(f"{n} {known[n].resolution:g}" for n in names)
        raise InvalidRequest(f"layers of one CogfeedDataset share one resolution ({by}): read the others as "
                             "another CogfeedDataset and join them with &")
    return res.pop()


#: Queries read in one ReadFootprint call by `__getitems__` (at most the daemon's
#: limits.max_batch_size, 4096 by default).
READ_MANY = 64


def _utc_ns(t: Any) -> "np.datetime64":
    """An instant as naive UTC nanoseconds (the index's unit), whatever zone it carries."""
    ts = pd.Timestamp(t)
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return np.datetime64(ts, "ns")


class _LazyClient:
    """A `Client` per process: made on first use, never one inherited through fork, not pickled."""

    def __init__(self, address: str, token: Optional[str], tls: Any) -> None:
        self.address, self.token, self.tls = address, token, tls
        self._client: Optional[Client] = None
        self._pid = 0

    def get(self) -> Client:
        if self._client is None or self._pid != os.getpid():
            # A client copied into a forked child belongs to the parent: leave it alone.
            self._client = Client(self.address, token=self.token, tls=self.tls)
            self._pid = os.getpid()
        return self._client

    def __getstate__(self) -> Dict[str, Any]:
        return {"address": self.address, "token": self.token, "tls": self.tls, "_client": None, "_pid": 0}


class CogfeedDataset(GeoDataset):
    """A map-space dataset of a cogfeed daemon as a torchgeo `GeoDataset` (module doc).

    `layers`: layers concatenated into `image` (default: the dataset's reference layer, unless
    only a `mask` is asked); `mask`: a layer returned as `mask`. `crs`: the CRS samples are
    read in (default: the CRS most of the Items are in); `res`: the pixel size of those
    layers in it (default: their configured resolution). `dtype` of `image` (float32).
    `transforms` applies to each sample, as for torchgeo's datasets. `token` and `tls` are as
    for `cogfeed.Client`.
    """

    def __init__(self, address: str, dataset: str, layers: Optional[Sequence[str]] = None,
                 mask: Optional[str] = None, crs: Any = None, res: Union[float, Tuple[float, float], None] = None,
                 dtype: "torch.dtype" = torch.float32, transforms: Any = None, token: Optional[str] = None,
                 tls: Any = None) -> None:
        self.address, self.dataset = address, dataset
        self._client = _LazyClient(address, token, tls)
        with Client(address, token=token, tls=tls) as c:
            info = c.describe(dataset)
        if layers is None:
            layers = [] if mask is not None else [info.layers[0].name] if info.layers else []
        self.layers, self.mask = list(layers), mask
        layer_res = _check_layers(info, self.layers, mask)
        #: Reference-layer pixels per pixel of these layers (ReadFootprint's resolution is the
        #: reference layer's; the others keep their ratio to it).
        self._ratio = info.layers[0].resolution / layer_res
        self.dtype, self.transforms = dtype, transforms
        self.info = info
        scenes = [s for s in info.scenes if s.crs and len(s.geotransform) == 6 and s.levels]
        if not scenes:
            raise InvalidRequest(f"dataset {dataset} has no georeferenced Items")
        crss = [s.crs for s in scenes]
        target = pyproj.CRS.from_user_input(crs if crs is not None else max(dict.fromkeys(crss), key=crss.count))
        geometries, intervals, items = [], [], []
        for s in scenes:
            box = shapely.segmentize(shapely.box(*_grid_box(s)), max(s.levels[0].width, s.levels[0].height)
                                     * abs(s.geotransform[1]) / 16)
            geometries.append(gpd.GeoSeries([box], crs=s.crs).to_crs(target).iloc[0])
            start = _time(s.start_datetime) or _time(s.datetime)
            end = _time(s.end_datetime) or _time(s.datetime)
            intervals.append((start or pd.Timestamp.min, end or pd.Timestamp.max))
            items.append(s.name)
        index = pd.IntervalIndex.from_tuples(intervals, closed="both", name="datetime")
        self.index = gpd.GeoDataFrame({"item": items}, index=index, geometry=geometries, crs=target)
        r = res if res is not None else layer_res
        self._res = (float(r), float(r)) if isinstance(r, (int, float)) else (float(r[0]), float(r[1]))
        self.paths = []
        self._arrays: Optional[Dict[str, np.ndarray]] = None
        self._epsg_code: Optional[str] = None

    @property
    def crs(self) -> "pyproj.CRS":
        """The CRS samples are read in (the index's)."""
        return self.index.crs

    @crs.setter
    def crs(self, new_crs: "pyproj.CRS") -> None:
        # torchgeo's setter reprojects the index in place: the arrays over it are stale.
        GeoDataset.crs.fset(self, new_crs)  # type: ignore[attr-defined]
        self._arrays, self._epsg_code = None, None

    def _index_arrays(self) -> Dict[str, np.ndarray]:
        """The index as arrays (bounds, times, geometries), made once per CRS: per query,
        numpy comparisons instead of pandas and geopandas selections."""
        if getattr(self, "_arrays", None) is None:
            b = self.index.geometry.bounds
            self._arrays = {
                "x0": b["minx"].to_numpy(), "y0": b["miny"].to_numpy(), "x1": b["maxx"].to_numpy(),
                "y1": b["maxy"].to_numpy(), "t0": self.index.index.left.to_numpy(dtype="datetime64[ns]"),
                "t1": self.index.index.right.to_numpy(dtype="datetime64[ns]"),
                "geometry": self.index.geometry.to_numpy(),
            }
        return self._arrays

    @property
    def bounds(self) -> Tuple[slice, slice, slice]:
        """Bounding x, y and t slices of the index (as torchgeo's, from the cached arrays)."""
        a = self._index_arrays()
        return (slice(a["x0"].min(), a["x1"].max(), self.res[0]), slice(a["y0"].min(), a["y1"].max(), self.res[1]),
                slice(pd.Timestamp(a["t0"].min()), pd.Timestamp(a["t1"].max()), 1))

    def _epsg(self) -> str:
        code = self.crs.to_epsg()
        if code is None:
            raise InvalidRequest(f"the dataset's CRS {self.crs.name!r} has no EPSG code: give crs='EPSG:<code>'")
        return f"EPSG:{code}"

    def _footprint(self, index: Any) -> Tuple[Dict[str, Any], Tuple[float, float], Tuple[float, float]]:
        """The ReadFootprint footprint of a query, its resolution and its time span (POSIX
        seconds); IndexError when it meets no index row."""
        x, y, t = self._disambiguate_slice(index)
        if x.step != y.step:
            raise InvalidRequest(f"x and y resolutions differ ({x.step}, {y.step}): ReadFootprint reads square pixels")
        # The index rows the query meets in time and space (torchgeo's overlaps and .cx).
        a = self._index_arrays()
        t0, t1 = _utc_ns(t.start), _utc_ns(t.stop)
        near = ((a["t0"] <= t1) & (a["t1"] >= t0) & (a["x0"] <= x.stop) & (a["x1"] >= x.start)
                & (a["y0"] <= y.stop) & (a["y1"] >= y.start))
        rows = np.flatnonzero(near)
        rows = rows[shapely.intersects(a["geometry"][rows], shapely.box(x.start, y.start, x.stop, y.stop))]
        if rows.size == 0:
            raise IndexError(f"index: {index} not found in dataset with bounds: {self.bounds}")
        ends = a["t1"][rows]
        ends = np.minimum(ends[ends != np.datetime64(pd.Timestamp.max, "ns")], t1)
        if self._epsg_code is None:
            self._epsg_code = self._epsg()
        footprint = {"bounds": (x.start, y.start, x.stop, y.stop), "crs": self._epsg_code,
                     "datetime": pd.Timestamp(ends.max()) if ends.size else None, "resolution": x.step * self._ratio}
        return footprint, (x.step, y.step), (pd.Timestamp(t.start).timestamp(), pd.Timestamp(t.stop).timestamp())

    def _read(self, queries: Sequence[Any]) -> List[Dict[str, "torch.Tensor"]]:
        """The samples of `queries`, read in one ReadFootprint call."""
        asked = [self._footprint(q) for q in queries]
        batch = self._client.get().read_many(self.dataset, [f for f, _, _ in asked],
                                             layers=self.layers + ([self.mask] if self.mask else []))
        out = []
        for j, (_, res, times) in enumerate(asked):
            layers = {name: a[j] for name, a in batch.layers.items()}
            sample = _sample(layers, self.layers, self.mask, self.dtype, batch.meta[j].bounds, res, times,
                             f"dataset {self.dataset}")
            out.append(self.transforms(sample) if self.transforms is not None else sample)
        return out

    def __getitem__(self, index: Any) -> Dict[str, "torch.Tensor"]:
        return self._read([index])[0]

    def __getitems__(self, indices: Sequence[Any]) -> List[Dict[str, "torch.Tensor"]]:
        """A DataLoader batch in one call per `READ_MANY` queries (torch's batched fetch);
        queries whose samples differ in shape, which one call cannot stack, are read one by one."""
        out: List[Dict[str, torch.Tensor]] = []
        for k in range(0, len(indices), READ_MANY):
            part = list(indices[k:k + READ_MANY])
            try:
                out += self._read(part)
            except InvalidRequest as e:
                if "one shape" not in e.details:
                    raise
                out += [self[q] for q in part]
        return out

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["info"] = self.info.SerializeToString()
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state["info"] = pb.DatasetInfo.FromString(state["info"])
        self.__dict__.update(state)


class CogfeedStreamDataset(StreamDataset):
    """The stream of a map-space dataset as torchgeo-style per-sample dicts (module doc):
    `image` from `layers` (default: the reference layer), `mask` from `mask`, `bounds` and
    `transform` from each sample's `SampleMeta`. `loader_args` are `cogfeed.Loader`'s (as for
    `cogfeed.torch.StreamDataset`); the layers asked for are streamed, no others."""

    def __init__(self, address: Union[str, Sequence[str], Client], dataset: str,
                 layers: Optional[Sequence[str]] = None, mask: Optional[str] = None,
                 dtype: "torch.dtype" = torch.float32, transforms: Any = None, **loader_args: Any) -> None:
        if "layers" in loader_args:
            raise TypeError("layers is this dataset's own argument")
        self.image_layers: List[str] = list(layers) if layers is not None else []
        self.mask = mask
        self.dtype, self.transforms = dtype, transforms
        streamed = self.image_layers + ([mask] if mask else [])
        super().__init__(address, dataset, layers=streamed or None, **loader_args)

    def __iter__(self) -> Iterator[Dict[str, "torch.Tensor"]]:  # type: ignore[override]
        for batch in super().__iter__():
            arrays = {name: t.numpy() for name, t in batch["layers"].items()}
            image = self.image_layers or ([next(iter(arrays))] if not self.mask else [])
            for i, m in enumerate(batch["meta"]):
                layers = {name: a[i] for name, a in arrays.items()}
                first = layers[image[0] if image else self.mask]
                res = (m.bounds[2] - m.bounds[0]) / first.shape[-1]
                when = _time(m.datetime or "")
                t = when.timestamp() if when is not None else float("nan")
                sample = _sample(layers, image, self.mask, self.dtype, m.bounds, (res, res), (t, t),
                                 f"dataset {self.dataset}")
                yield self.transforms(sample) if self.transforms is not None else sample


__all__ = ("CogfeedDataset", "CogfeedStreamDataset")
