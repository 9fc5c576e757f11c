"""xarray integration: `read(...)`, one footprint of a map-space dataset as an `xarray.Dataset`.

One DataArray per layer, dims `(band, y, x)` (time layers `(time, band, y, x)`), values the
very arrays `Client.read` returns (no copy). Coordinates:

- `x`, `y`: pixel centres from the sample's bounds (`SampleMeta.bounds`, snapped as the
  daemon snapped them) and the layer's shape, `y` from north to south;
- `band`: the layer's asset names (from `DescribeDataset`), or 1..C when they do not say;
- `time`: the day of each step (`SampleMeta.datetimes`; NaT for a step without a date), with
  a boolean `<time dim>_valid` coordinate from the time mask;
- `spatial_ref`: rioxarray's convention, a scalar coordinate whose attrs hold the CRS
  (`crs_wkt` and `spatial_ref` as WKT when pyproj is importable, else `spatial_ref` as
  "EPSG:<code>"; `epsg` always), named by each DataArray's `grid_mapping` attr, so
  `ds.rio.crs` works.

Layers at other resolutions, and layers with other bands or dates, cannot share a dim with the
first layer: a dim keeps its plain name (`x`, `band`, `time`, ...) for every layer whose
coordinate equals the first one that used it, and is named `<dim>_<layer>` otherwise
(`x_swir`, `band_swir`). Nodata is each DataArray's `_FillValue` and `nodata` attrs; the
sample's metadata (items, drawn Item, datetime, CRS, bounds, resolution, valid fraction,
split, dataset version) is in the Dataset's attrs.

xarray is an optional dependency: `pip install cogfeed[xarray]`.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._client import Batch, Client
from .v1 import feed_pb2 as pb

try:
    import xarray as xr
except ImportError as e:  # pragma: no cover - exercised only where xarray is missing
    raise ImportError("cogfeed.xarray needs xarray: pip install 'cogfeed[xarray]' (or pip install xarray)") from e


def _crs_attrs(crs: str) -> Dict[str, Any]:
    """rioxarray's `spatial_ref` attrs of an EPSG:<code> CRS."""
    attrs: Dict[str, Any] = {"spatial_ref": crs}
    code = crs.split(":", 1)[1] if crs.upper().startswith("EPSG:") else ""
    if code.isdigit():
        attrs["epsg"] = int(code)
    try:
        import pyproj

        wkt = pyproj.CRS.from_user_input(crs).to_wkt()
        attrs.update(crs_wkt=wkt, spatial_ref=wkt)
    except Exception:  # noqa: BLE001 - no pyproj, or a CRS it does not know: the code alone
        pass
    return attrs


def _band_names(info: Optional[pb.LayerInfo], bands: int) -> List[Any]:
    """A layer's band names: its assets when there is one band per asset, `asset_k` when each
    asset has the same number of bands, else 1..bands."""
    assets = list(info.assets) if info is not None else []
    if len(assets) == bands:
        return assets
    if assets and bands % len(assets) == 0:
        per = bands // len(assets)
        return [f"{a}_{k + 1}" for a in assets for k in range(per)]
    return list(range(1, bands + 1))


def _centres(lo: float, hi: float, n: int, descending: bool = False) -> np.ndarray:
    step = (hi - lo) / n
    c = lo + (np.arange(n) + 0.5) * step
    return c[::-1].copy() if descending else c


def _times(days: Sequence[str]) -> np.ndarray:
    return np.array([np.datetime64(d, "ns") if d else np.datetime64("NaT", "ns") for d in days])


def _fill(value: float, dtype: np.dtype) -> Any:
    """The nodata value in the layer's type (as float when the type cannot hold it)."""
    if np.issubdtype(dtype, np.integer):
        bounds = np.iinfo(dtype)
        if float(value).is_integer() and bounds.min <= value <= bounds.max:
            return dtype.type(value)
        return float(value)
    return dtype.type(value)


class _Dims:
    """Dim names shared between layers whose coordinates are equal (see the module doc)."""

    def __init__(self) -> None:
        self.coords: Dict[str, np.ndarray] = {}

    def name(self, dim: str, layer: str, values: np.ndarray) -> str:
        for name in (dim, f"{dim}_{layer}"):
            held = self.coords.get(name)
            if held is None:
                self.coords[name] = values
                return name
            if held.shape == values.shape and (held == values).all():
                return name
        raise ValueError(f"layer {layer!r}: no name left for its {dim} dim")


def to_dataset(batch: Batch, info: Optional[pb.DatasetInfo] = None, sample: int = 0) -> "xr.Dataset":
    """Sample `sample` of a map-space `Batch` (from `Client.read`, `read_many` or a stream) as an
    `xarray.Dataset`; `info` (the dataset's `DatasetInfo`) names bands and nodata."""
    if not batch.meta:
        raise ValueError("not a map-space batch: it has no sample metadata")
    m = batch.meta[sample]
    layer_info = {l.name: l for l in info.layers} if info is not None else {}
    minx, miny, maxx, maxy = m.bounds
    dims = _Dims()
    variables: Dict[str, Any] = {}
    coords: Dict[str, Any] = {"spatial_ref": ((), 0, _crs_attrs(m.crs))}
    for name, array in batch.layers.items():
        a = array[sample]
        timed = a.ndim == 4
        bands, height, width = a.shape[-3:]
        li = layer_info.get(name)
        band = np.array(_band_names(li, bands))
        names: List[str] = []
        if timed:
            days = m.datetimes.get(name, ("",) * a.shape[0])
            t = _times(days)
            tdim = dims.name("time", name, t)
            names.append(tdim)
            coords[tdim] = (tdim, t)
            if name in batch.time_masks:
                coords[f"{tdim}_valid"] = (tdim, batch.time_masks[name][sample].astype(bool))
        bdim = dims.name("band", name, band)
        ydim = dims.name("y", name, _centres(miny, maxy, height, descending=True))
        xdim = dims.name("x", name, _centres(minx, maxx, width))
        for d in (bdim, ydim, xdim):
            coords[d] = (d, dims.coords[d])
        names += [bdim, ydim, xdim]
        attrs: Dict[str, Any] = {"grid_mapping": "spatial_ref", "resolution": (maxx - minx) / width}
        if li is not None:
            fill = _fill(li.nodata, a.dtype)
            attrs.update(_FillValue=fill, nodata=fill, resampling=li.resampling, assets=list(li.assets))
        variables[name] = xr.Variable(names, a, attrs)
    attrs = {
        "dataset": (info.name if info is not None else "") or m.dataset, "crs": m.crs, "bounds": list(m.bounds),
        "resolution": m.resolution, "items": list(m.items), "drawn": m.drawn, "datetime": m.datetime or "",
        "padded": int(m.padded), "split": m.split, "dataset_version": batch.dataset_version,
    }
    if m.valid_fraction is not None:
        attrs["valid_fraction"] = m.valid_fraction
    return xr.Dataset(variables, coords={k: xr.Variable(*v) for k, v in coords.items()}, attrs=attrs)


def read(client_or_address: Union[Client, str], dataset: str, bounds: Sequence[float], crs: str,
         datetime: Any = None, layers: Optional[Sequence[str]] = None, resolution: Optional[float] = None,
         item: Optional[str] = None, token: Optional[str] = None, tls: Any = None) -> "xr.Dataset":
    """One footprint of a map-space dataset as an `xarray.Dataset` (the module doc says how).
    The arguments are `Client.read`'s; `client_or_address` is a `Client` or an address (a
    client is opened for the call with `token` and `tls`, and closed)."""
    own = not isinstance(client_or_address, Client)
    client = Client(client_or_address, token=token, tls=tls) if own else client_or_address
    try:
        batch = client.read(dataset, bounds, crs, datetime=datetime, layers=layers, resolution=resolution,
                            item=item)
        info = client.describe(dataset)
    finally:
        if own:
            client.close()
    return to_dataset(batch, info)


__all__: Tuple[str, ...] = ("read", "to_dataset")
