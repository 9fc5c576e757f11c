"""`cogfeed.xarray.read` against the real daemon's map-space demos: one DataArray per layer
with the very values `Client.read` returns, pixel-centre x/y coordinates that map back to the
footprint's bounds, band names from `DescribeDataset`, time coordinates from the sample's
dates, rioxarray's `spatial_ref` convention and nodata attrs. Skipped without xarray."""

import numpy as np
import pytest

import cogfeed

xr = pytest.importorskip("xarray")
cx = pytest.importorskip("cogfeed.xarray")


def a_sample(address, dataset, seed=5):
    (b,) = list(cogfeed.Loader(address, dataset, patch_size=32, batch_size=1, max_batches=1, seed=seed))
    return b, b.meta[0]


def assert_grid(da, bounds, xdim, ydim):
    """x/y are pixel centres over `bounds`: half a pixel in from each edge, even steps,
    y from north to south."""
    minx, miny, maxx, maxy = bounds
    x, y = da[xdim].values, da[ydim].values
    dx, dy = (maxx - minx) / x.size, (maxy - miny) / y.size
    assert np.allclose(np.diff(x), dx) and np.allclose(np.diff(y), -dy)
    assert x[0] - dx / 2 == pytest.approx(minx) and x[-1] + dx / 2 == pytest.approx(maxx)
    assert y[0] + dy / 2 == pytest.approx(maxy) and y[-1] - dy / 2 == pytest.approx(miny)


def test_layers_values_coordinates_crs_and_nodata(daemon):
    b, m = a_sample(daemon.address, "demo-stac")
    with cogfeed.Client(daemon.address) as c:
        ds = cx.read(c, "demo-stac", m.bounds, m.crs, datetime=m.datetime, item=m.drawn)
        ref = c.read("demo-stac", m.bounds, m.crs, datetime=m.datetime, item=m.drawn)
        info = c.describe("demo-stac")
    assert isinstance(ds, xr.Dataset) and list(ds.data_vars) == ["image", "swir", "label"]
    for name in ds.data_vars:
        assert ds[name].dtype == ref[name].dtype
        assert np.array_equal(ds[name].values, ref[name][0]) and ds[name].values.tobytes() == b[name][0].tobytes()
        assert ds[name].attrs["grid_mapping"] == "spatial_ref"
    image, swir, label = ds["image"], ds["swir"], ds["label"]
    assert image.dims == ("band", "y", "x") and image.shape == (4, 32, 32)
    assert list(image["band"].values) == ["B02", "B03", "B04", "B08"]
    # The 20 m layer has its own grid and bands; the label shares the image's grid.
    assert swir.dims == ("band_swir", "y_swir", "x_swir") and swir.shape == (1, 16, 16)
    assert list(swir["band_swir"].values) == ["B11"]
    assert label.dims == ("band_label", "y", "x")
    assert_grid(image, m.bounds, "x", "y")
    assert_grid(swir, m.bounds, "x_swir", "y_swir")
    assert image.attrs["resolution"] == 10.0 and swir.attrs["resolution"] == 20.0
    # Nodata: the label's 255 in its own type; the image's default 0.
    assert label.attrs["_FillValue"] == 255 and label.attrs["nodata"] == 255
    assert label.attrs["_FillValue"].dtype == np.uint8
    assert image.attrs["nodata"] == info.layers[0].nodata == 0
    # CRS as rioxarray reads it.
    ref_attrs = ds["spatial_ref"].attrs
    assert ref_attrs["epsg"] == int(m.crs.split(":")[1])
    try:
        import pyproj
    except ImportError:
        assert ref_attrs["spatial_ref"] == m.crs
    else:
        assert pyproj.CRS.from_wkt(ref_attrs["crs_wkt"]).to_epsg() == ref_attrs["epsg"]
        assert ref_attrs["spatial_ref"] == ref_attrs["crs_wkt"]
    try:
        import rioxarray  # noqa: F401
    except ImportError:
        pass
    else:
        assert ds.rio.crs.to_epsg() == ref_attrs["epsg"]
        assert ds["image"].rio.bounds() == pytest.approx(m.bounds)
    # The sample's metadata.
    assert ds.attrs["items"] == list(m.items) and ds.attrs["drawn"] == m.drawn
    assert ds.attrs["bounds"] == list(m.bounds) and ds.attrs["crs"] == m.crs
    assert ds.attrs["dataset"] == "demo-stac" and ds.attrs["dataset_version"] == ref.dataset_version


def test_time_layers_have_time_coordinates_and_masks(daemon):
    b, m = a_sample(daemon.address, "demo-series", seed=9)
    ds = cx.read(daemon.address, "demo-series", m.bounds, m.crs, datetime=m.datetime, item=m.drawn,
                 layers=["s2", "s1_asc", "label"])
    assert list(ds.data_vars) == ["s2", "s1_asc", "label"]
    s2, s1 = ds["s2"], ds["s1_asc"]
    assert s2.dims == ("time", "band", "y", "x") and s2.shape == (3, 4, 32, 32)
    assert s2.values.tobytes() == b["s2"][0].tobytes() and s1.values.tobytes() == b["s1_asc"][0].tobytes()
    days = [np.datetime64(d, "ns") if d else np.datetime64("NaT", "ns") for d in m.datetimes["s2"]]
    assert np.array_equal(s2["time"].values, np.array(days), equal_nan=True)
    assert list(ds["time_valid"].values) == [bool(v) for v in b.time_masks["s2"][0]]
    assert s1.dims[0] == "time_s1_asc" and list(s1[s1.dims[1]].values) == ["vv", "vh"]
    assert_grid(s1, m.bounds, "x_s1_asc", "y_s1_asc")
    assert "valid_fraction" in ds.attrs and ds.attrs["split"] == m.split


def test_to_dataset_of_a_streamed_batch_and_errors(daemon):
    b, m = a_sample(daemon.address, "demo-stac", seed=11)
    ds = cx.to_dataset(b, b.info)
    assert ds["image"].values.tobytes() == b["image"][0].tobytes()
    with pytest.raises(cogfeed.InvalidRequest, match="meet no item"):
        cx.read(daemon.address, "demo-stac", (100000.0, 1000000.0, 100320.0, 1000320.0), m.crs)
    (scene,) = list(cogfeed.Loader(daemon.address, "demo", patch_size=32, batch_size=1, max_batches=1))
    with pytest.raises(ValueError, match="not a map-space batch"):
        cx.to_dataset(scene)
