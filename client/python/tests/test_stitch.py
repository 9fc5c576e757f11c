"""`cogfeed.Stitcher`: predictions over a grid stream written back to COGs, checked against
numpy references computed here over whole scenes, with GDAL as the reader.

GDAL's Python bindings (Debian's python3-gdal) are importable by the system interpreter only,
so the files are read by `/usr/bin/python3` in a subprocess (`GDAL_READER`) that dumps pixels
to .npy files and the rest to JSON; the tests needing it skip when it is missing.
"""

import io
import json
import math
import os
import re
import stat
import subprocess
import warnings

import numpy as np
import pytest

import cogfeed
from cogfeed import _cog
from cogfeed.stitch import grid_steps
from cogfeed.v1 import feed_pb2 as pb

SYSTEM_PYTHON = "/usr/bin/python3"
GDAL_READER = r"""
import json, sys
import numpy as np
from osgeo import gdal
from osgeo_utils.samples.validate_cloud_optimized_geotiff import validate
gdal.UseExceptions()
out, report = sys.argv[1], []
for i, path in enumerate(sys.argv[2:]):
    ds = gdal.Open(path)
    band = ds.GetRasterBand(1)
    srs = ds.GetSpatialRef()
    if srs is not None:
        srs.AutoIdentifyEPSG()
    levels = [ds.ReadAsArray()] + [
        np.stack([ds.GetRasterBand(b + 1).GetOverview(k).ReadAsArray() for b in range(ds.RasterCount)])
        for k in range(band.GetOverviewCount())]
    for k, pixels in enumerate(levels):
        np.save(f"{out}/{i}_{k}.npy", pixels.reshape(ds.RasterCount, *pixels.shape[-2:]))
    with open(path, "rb") as f:
        magic = int.from_bytes(f.read(4)[2:], "little")
    report.append({
        "size": [ds.RasterXSize, ds.RasterYSize], "bands": ds.RasterCount,
        "dtype": gdal.GetDataTypeName(band.DataType),
        "geotransform": ds.GetGeoTransform(can_return_null=True),
        "epsg": int(srs.GetAuthorityCode(None)) if srs is not None else None,
        "block": band.GetBlockSize(),
        "overviews": [[band.GetOverview(k).XSize, band.GetOverview(k).YSize] for k in range(band.GetOverviewCount())],
        "structure": ds.GetMetadata("IMAGE_STRUCTURE"), "nodata": str(band.GetNoDataValue()),
        "cog_errors": validate(ds, full_check=True)[1], "magic": magic,
    })
json.dump(report, open(f"{out}/report.json", "w"))
"""


@pytest.fixture(scope="session")
def gdal_read(tmp_path_factory):
    """read(paths) -> one dict per file: GDAL's view of it, "levels" holding the pixels
    [K, H, W] of full resolution then each overview."""
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "from osgeo import gdal"], capture_output=True)
    if probe.returncode != 0:
        why = f"{SYSTEM_PYTHON} cannot import osgeo (install gdal-bin and python3-gdal) to read the outputs"
        if os.environ.get("COGFEED_REQUIRE_GDAL") == "1":
            pytest.fail(why)
        pytest.skip(why)

    def read(paths):
        out = tmp_path_factory.mktemp("gdal")
        subprocess.run([SYSTEM_PYTHON, "-c", GDAL_READER, str(out), *map(str, paths)], check=True)
        report = json.loads((out / "report.json").read_text())
        for i, r in enumerate(report):
            r["levels"] = [np.load(out / f"{i}_{k}.npy") for k in range(1 + len(r["overviews"]))]
        return report

    return read


def blend_reference(origins, preds, height, width, blend):
    """The stitched image [K, height, width] float32, accumulated over the whole scene:
    prediction p lands with its top-left corner at origin (row, col). Non-finite values are
    left out, band by band (NaN where no finite value landed)."""
    bands, h, w = preds[0].shape
    if blend == "center":
        yy, xx = np.mgrid[0:height, 0:width]
        best, value = np.full((bands, height, width), np.inf), np.full((bands, height, width), np.nan)
        # In (row, col) order, a strictly nearer centre wins: ties stay with the earlier window.
        for (r0, c0), p in sorted(zip(origins, preds), key=lambda t: t[0]):
            distance = np.maximum(np.abs(yy - (r0 + (h - 1) / 2)), np.abs(xx - (c0 + (w - 1) / 2)))
            inside = (yy >= r0) & (yy < r0 + h) & (xx >= c0) & (xx < c0 + w)
            for k in range(bands):  # band by band: non-finite values are skipped
                take = inside.copy()
                take[inside] = np.isfinite(p[k, yy[inside] - r0, xx[inside] - c0])
                take &= distance < best[k]
                best[k][take] = distance[take]
                value[k][take] = p[k, yy[take] - r0, xx[take] - c0]
        return value.astype(np.float32)
    num, den = np.zeros((bands, height, width)), np.zeros((bands, height, width))
    if blend == "cosine":
        weight = np.sin(np.pi * (np.arange(h)[:, None] + 0.5) / h) ** 2 * np.sin(np.pi * (np.arange(w) + 0.5) / w) ** 2
    else:
        weight = np.ones((h, w))
    for (r0, c0), p in zip(origins, preds):
        hh, ww = min(h, height - r0), min(w, width - c0)
        p = p[:, :hh, :ww]
        finite = np.isfinite(p)  # non-finite values do not count, their weight neither
        num[:, r0:r0 + hh, c0:c0 + ww] += weight[:hh, :ww] * np.where(finite, p, 0)
        den[:, r0:r0 + hh, c0:c0 + ww] += weight[:hh, :ww] * finite
    with np.errstate(invalid="ignore"):
        return np.where(den > 0, num / den, np.nan).astype(np.float32)


def overview_reference(values):
    """The next overview: NaN-ignoring means of 2 x 2 blocks (edge blocks as they are)."""
    bands, h, w = values.shape
    padded = np.full((bands, h + h % 2, w + w % 2), np.nan)
    padded[:, :h, :w] = values
    blocks = padded.reshape(bands, padded.shape[1] // 2, 2, padded.shape[2] // 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks
        return np.nanmean(blocks, axis=(2, 4)).astype(np.float32)


def assert_pixels(got, expected):
    assert got.shape == expected.shape
    assert np.array_equal(np.isnan(got), np.isnan(expected)), "NaN masks differ"
    np.testing.assert_allclose(got, expected, rtol=1e-6, equal_nan=True)


def three_band_predictions(batch, first):
    """[B, 3, h, w]: band 1, band 2 / 2 + the window's column / 1000, and a constant per
    window (its position in the stream from `first`): overlaps differ, blending matters."""
    image = batch.image.astype(np.float64)
    offset = batch.windows[:, 1, None, None] / 1000
    constant = (first + np.arange(len(image)))[:, None, None] * np.ones(image.shape[2:])
    return np.stack([image[:, 0], image[:, 1] * 0.5 + offset, constant], axis=1)


@pytest.fixture(scope="module")
def demo(daemon):
    """The demo dataset's info and the grid stream (patch 256, stride 192) of scene 0."""
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo")
    per_scene = grid_steps(1024, 256, 192) ** 2
    assert per_scene == 25
    loader = cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=256, stride=192, batch_size=5,
                            max_batches=per_scene // 5)
    batches = list(loader)
    assert {int(s) for b in batches for s in b.windows[:, 0]} == {0}
    return info, batches


@pytest.mark.parametrize("blend", ["mean", "cosine", "center"])
def test_blends_equal_a_whole_scene_reference(demo, gdal_read, tmp_path, blend):
    info, batches = demo
    preds = [three_band_predictions(b, 5 * i) for i, b in enumerate(batches)]
    st = cogfeed.Stitcher(info, out=tmp_path / "pred_{scene}.tif", blend=blend, patch_size=256, stride=192)
    st.add(batches[0], preds[0])
    st.add(batches[0], preds[0] + 1000)  # a repeated window (as after a resume) is ignored
    for b, p in zip(batches[1:], preds[1:]):
        st.add(b, p)
    assert st.finish() == [str(tmp_path / "pred_scene_00.tif")]
    assert st.incomplete_tiles == 0
    (r,) = gdal_read(st.finish())

    origins = [(int(w[2]), int(w[1])) for b in batches for w in b.windows]
    expected = blend_reference(origins, [p for ps in preds for p in ps], 1024, 1024, blend)
    assert r["size"] == [1024, 1024] and r["bands"] == 3 and r["dtype"] == "Float32"
    assert_pixels(r["levels"][0], expected)
    assert r["overviews"] == [[512, 512], [256, 256]]
    for level in r["levels"][1:]:
        expected = overview_reference(expected)
        assert_pixels(level, expected)
    assert r["geotransform"] == list(info.scenes[0].geotransform)
    assert f"EPSG:{r['epsg']}" == info.scenes[0].crs
    assert r["block"] == [256, 256] and r["structure"]["COMPRESSION"] == "DEFLATE"
    assert r["structure"]["INTERLEAVE"] == "PIXEL" and r["nodata"] == "nan"
    assert r["cog_errors"] == [] and r["magic"] == 42
    assert sorted(os.listdir(tmp_path)) == ["pred_scene_00.tif"], "temporary files left behind"


def test_identity_reproduces_the_scene_at_a_level(daemon, gdal_read, tmp_path):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo")
        image, _ = c.read_window("demo", 0, 0, 0, 512, 512, level=1)
    loader = cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=256, stride=192, level=1,
                            batch_size=3, max_batches=3)
    batches = list(loader)
    paths = []
    for blend in ("mean", "cosine", "center"):
        with cogfeed.Stitcher(info, out=tmp_path / f"{blend}.tif", blend=blend, patch_size=256, stride=192,
                              level=1) as st:
            for b in batches:
                st.add(b, b.image)
        paths += st.finish()
    x0, dx, rx, y0, ry, dy = info.scenes[0].geotransform
    for r in gdal_read(paths):
        assert np.array_equal(r["levels"][0], image.astype(np.float32))
        assert r["geotransform"] == [x0, 2 * dx, 2 * rx, y0, 2 * ry, 2 * dy]
        assert r["overviews"] == [[256, 256]]


@pytest.mark.parametrize("tile_size", [256, 128])
def test_memory_is_bounded_and_spools_go(demo, tmp_path, tile_size):
    info, batches = demo
    st = cogfeed.Stitcher(info, out=tmp_path / "p.tif", blend="mean", patch_size=256, stride=192, tile_size=tile_size)
    for b in batches:
        st.add(b, b.image[:, :1])
        if b is batches[0]:
            spools = [n for n in os.listdir(tmp_path) if n.endswith(".spool")]
            assert len(spools) == 1
    across = math.ceil(1024 / tile_size)
    # Windows arrive row by row: open tiles are those of the rows of tiles one row of
    # windows spans.
    assert 0 < st.peak_tiles_in_memory <= across * (math.ceil(256 / tile_size) + 1) < across ** 2
    assert os.listdir(tmp_path) == ["p.tif"], "the scene is written as soon as its last window arrives"
    assert st.finish() == [str(tmp_path / "p.tif")]


def test_missing_windows_are_written_with_what_arrived(demo, gdal_read, tmp_path):
    info, batches = demo
    kept = batches[:2] + batches[3:]  # the middle row of windows never arrives
    st = cogfeed.Stitcher(info, out=tmp_path / "p.tif", blend="cosine", patch_size=256, stride=192)
    for b in kept:
        st.add(b, b.image[:, :1])
    with pytest.warns(UserWarning, match="lacked windows"):
        (path,) = st.finish()
    assert st.incomplete_tiles == 8  # two rows of tiles touch window row 2
    origins = [(int(w[2]), int(w[1])) for b in kept for w in b.windows]
    expected = blend_reference(origins, [p for b in kept for p in b.image[:, :1]], 1024, 1024, "cosine")
    assert np.isnan(expected).any()
    (r,) = gdal_read([path])
    assert_pixels(r["levels"][0], expected)


def test_map_space_layer_grid(daemon, gdal_read, tmp_path):
    with cogfeed.Client(daemon.address) as c:
        info = c.describe("demo-stac")
    loader = cogfeed.Loader(daemon.address, "demo-stac", sampler="grid", patch_size=64, stride=48, batch_size=11,
                            layers=["swir"])
    batches = list(loader)
    windows = np.concatenate([b.windows for b in batches])
    assert len(windows) == sum(grid_steps(s.levels[0].width, 64, 48) * grid_steps(s.levels[0].height, 64, 48)
                               for s in info.scenes)
    # Two bands: swir itself and the window's row (a constant per window row).
    preds = [np.concatenate([b["swir"], np.broadcast_to(b.windows[:, 2, None, None, None], b["swir"].shape)], axis=1)
             for b in batches]
    st = cogfeed.Stitcher(info, layer="swir", out=tmp_path / "{scene}.tif", blend="cosine", patch_size=64, stride=48,
                          tile_size=64)
    for b, p in zip(batches, preds):
        st.add(b, p)
    paths = st.finish()
    assert paths == [str(tmp_path / f"{s.name}.tif") for s in info.scenes]
    preds = np.concatenate(preds)
    for scene, r in zip(info.scenes, gdal_read(paths)):
        x0, dx, rx, y0, ry, dy = scene.geotransform
        assert r["geotransform"] == [x0, 20.0, 0.0, y0, 0.0, -20.0] == [x0, dx * 2, rx, y0, ry, dy * 2]
        assert f"EPSG:{r['epsg']}" == scene.crs
        size = math.ceil(scene.levels[0].width / 2)
        assert r["size"] == [size, size] and r["overviews"] == [[128, 128], [64, 64]]
        mine = windows[:, 0] == scene.index
        origins = [(int(w[2]) // 2, int(w[1]) // 2) for w in windows[mine]]
        assert_pixels(r["levels"][0], blend_reference(origins, preds[mine], size, size, "cosine"))
    assert {s.crs for s in info.scenes} == {"EPSG:32632", "EPSG:32633"}


def test_non_square_rotated_scene_in_any_order(gdal_read, tmp_path):
    """No daemon: a made-up scene, wider than high, with a rotated geotransform in a
    geographic CRS; level 1 is 2x narrower and 3x lower; windows arrive shuffled."""
    gt = [100.0, 2.0, 0.5, 50.0, 0.25, -3.0]
    info = pb.DatasetInfo(name="made-up", scenes=[pb.SceneInfo(
        index=0, name="wide.TIFF", levels=[pb.Level(width=200, height=120), pb.Level(width=100, height=40)],
        geotransform=gt, crs="EPSG:4326")])
    nx, ny = grid_steps(100, 32, 24), grid_steps(40, 32, 24)
    windows = np.array([[0, 24 * i, 24 * j, 32, 32, 1, 0] for j in range(ny) for i in range(nx)])
    rng = np.random.default_rng(1)
    preds = rng.normal(size=(len(windows), 2, 32, 32))
    order = rng.permutation(len(windows))
    paths = []
    for blend in ("cosine", "center"):
        st = cogfeed.Stitcher(info, out=tmp_path / f"{blend}-{{scene}}.tif", blend=blend, patch_size=32, stride=24,
                              level=1, tile_size=16)
        for chunk in np.array_split(order, 4):
            st.add(windows[chunk], preds[chunk])
        assert st.incomplete_tiles == 0 and os.listdir(tmp_path).count(f"{blend}-wide.tif") == 1
        paths += st.finish()
    origins = [(int(w[2]), int(w[1])) for w in windows]
    for blend, r in zip(("cosine", "center"), gdal_read(paths)):
        expected = blend_reference(origins, preds, 40, 100, blend)
        assert_pixels(r["levels"][0], expected)
        assert r["overviews"] == [[50, 20], [25, 10], [13, 5]]
        for level in r["levels"][1:]:
            expected = overview_reference(expected)
            assert_pixels(level, expected)
        assert r["geotransform"] == pytest.approx([100.0, 4.0, 1.5, 50.0, 0.5, -9.0])
        assert r["epsg"] == 4326 and r["cog_errors"] == []


def test_cog_writer_variants(gdal_read, tmp_path):
    """_cog on its own: a rotated geotransform, a geographic CRS, one band, odd sizes, BigTIFF
    and a file without a CRS."""
    rng = np.random.default_rng(0)
    values = rng.normal(size=(1, 37, 53)).astype(np.float32)
    values[0, :3, :5] = np.nan
    sizes = _cog.overview_sizes(53, 37, 16)
    assert sizes == [(53, 37), (27, 19), (14, 10)]
    levels = [values]
    for _ in sizes[1:]:
        levels.append(_cog.decimate(levels[-1]))
    spool_path = tmp_path / "spool"
    blocks = []
    with open(spool_path, "w+b") as spool:
        for level in levels:
            blocks.append([])
            for ty in range(0, level.shape[1], 16):
                for tx in range(0, level.shape[2], 16):
                    data = _cog.encode_tile(level[:, ty:ty + 16, tx:tx + 16], 16)
                    blocks[-1].append((spool.tell(), len(data)))
                    spool.write(data)
        rotated = [10.0, 0.001, 0.0002, 50.0, 0.0003, -0.001]
        _cog.write_cog(tmp_path / "a.tif", sizes, 1, 16, blocks, spool, rotated, 4326, bigtiff=True)
        _cog.write_cog(tmp_path / "b.tif", sizes, 1, 16, blocks, spool, [0, 2, 0, 100, 0, -2], None)
    a, b = gdal_read([tmp_path / "a.tif", tmp_path / "b.tif"])
    assert a["magic"] == 43 and b["magic"] == 42
    assert a["geotransform"] == pytest.approx(rotated) and a["epsg"] == 4326
    assert b["geotransform"] == [0, 2, 0, 100, 0, -2] and b["epsg"] is None
    for r in (a, b):
        assert r["cog_errors"] == [] and r["overviews"] == [list(s) for s in sizes[1:]]
        for got, expected in zip(r["levels"], levels):
            assert_pixels(got, expected)
    assert_pixels(levels[1], overview_reference(values))


def test_errors_name_the_offending_value(daemon, tmp_path):
    with cogfeed.Client(daemon.address) as c:
        demo, stac = c.describe("demo"), c.describe("demo-stac")
    with pytest.raises(ValueError, match="unknown blend 'gaussian'"):
        cogfeed.Stitcher(demo, out=tmp_path / "p.tif", blend="gaussian")
    with pytest.raises(ValueError, match="unknown layer 'swir'.*not map-space"):
        cogfeed.Stitcher(demo, out=tmp_path / "p.tif", layer="swir")
    with pytest.raises(ValueError, match="unknown layer 'nope'.*image, swir, label"):
        cogfeed.Stitcher(stac, out=tmp_path / "p.tif", layer="nope")
    with pytest.raises(ValueError, match="stride 47 is 23.5 pixels of layer 'swir'"):
        cogfeed.Stitcher(stac, out=tmp_path / "p.tif", layer="swir", patch_size=64, stride=47)
    with pytest.raises(ValueError, match="tile_size must be a multiple of 16, got 100"):
        cogfeed.Stitcher(demo, out=tmp_path / "p.tif", tile_size=100)

    window = np.array([[0, 0, 0, 64, 64, 0, 0]])
    st = cogfeed.Stitcher(stac, out=tmp_path / "p.tif", layer="swir", patch_size=64, stride=48)
    with pytest.raises(ValueError, match=r"shape \(1, 1, 64, 64\).*expected \[1, K, 32, 32\]"):
        st.add(window, np.zeros((1, 1, 64, 64)))
    with pytest.raises(TypeError, match="complex"):
        st.add(window, np.zeros((1, 1, 32, 32), dtype=complex))
    with pytest.raises(ValueError, match="not on the grid"):
        st.add(np.array([[0, 10, 0, 64, 64, 0, 0]]), np.zeros((1, 1, 32, 32)))

    with pytest.raises(ValueError, match=r"scenes 0 and 1 .* no '\{scene\}' placeholder"):
        with cogfeed.Stitcher(demo, out=tmp_path / "one.tif", patch_size=256, stride=192) as st:
            st.add(np.array([[0, 0, 0, 256, 256, 0, 0]]), np.ones((1, 2, 256, 256)))
            st.add(np.array([[1, 0, 0, 256, 256, 0, 0]]), np.ones((1, 2, 256, 256)))
    assert os.listdir(tmp_path) == [], "an exception in the with block drops the temporary files"


def test_loader_length_drives_tqdm(daemon):
    tqdm = pytest.importorskip("tqdm").tqdm
    loader = cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=256, stride=192, batch_size=5,
                            max_batches=3)
    bar = tqdm(loader, file=io.StringIO())
    assert bar.total == len(loader) == 3
    assert sum(1 for _ in bar) == 3 == bar.n


def made_up(*names, width=32, height=32):
    """No daemon: a DatasetInfo of scenes `names`, each `width` x `height` at one level."""
    return pb.DatasetInfo(name="made-up", scenes=[
        pb.SceneInfo(index=i, name=n, levels=[pb.Level(width=width, height=height)],
                     geotransform=[0.0, 1.0, 0.0, 0.0, 0.0, -1.0], crs="EPSG:32632")
        for i, n in enumerate(names)])


def not_regular(kind, path, elsewhere):
    """Puts a `kind` at `path` (targets of links in the directory `elsewhere`); returns what
    the refusal calls it."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "link to a fifo":
        os.mkfifo(elsewhere / "fifo")
        os.symlink(elsewhere / "fifo", path)
    elif kind == "link to a file":
        (elsewhere / "file.tif").write_bytes(b"precious")
        os.symlink(elsewhere / "file.tif", path)
    elif kind == "dangling link":
        os.symlink(elsewhere / "nothing", path)
    return {"fifo": "fifo", "directory": "directory", "link to a fifo": "symbolic link to a fifo",
            "link to a file": "symbolic link to a regular file", "dangling link": "dangling symbolic link"}[kind]


KINDS = ["fifo", "directory", "link to a fifo", "link to a file", "dangling link"]


def snapshot(path):
    """What is at `path` (not followed), to check that a refusal left it alone."""
    st = os.lstat(path)
    return st.st_mode, st.st_ino, (os.readlink(path) if os.path.islink(path) else None)


@pytest.mark.parametrize("kind", KINDS)
def test_a_target_that_is_not_a_regular_file_is_refused_up_front(tmp_path, kind):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir(), elsewhere.mkdir()
    what = not_regular(kind, out / "p.tif", elsewhere)
    before = snapshot(out / "p.tif")
    with pytest.raises(cogfeed.InvalidRequest, match=f"{re.escape(repr(str(out / 'p.tif')))} is a {what}"):
        cogfeed.Stitcher(made_up("a.tif"), out=out / "p.tif", patch_size=32, tile_size=16)
    # With a placeholder, the scene's path is refused when its first window arrives.
    st = cogfeed.Stitcher(made_up("p.tif"), out=out / "{scene}.tif", patch_size=32, tile_size=16)
    with pytest.raises(ValueError, match=f"is a {what}, not a regular file"):
        st.add(np.array([[0, 0, 0, 32, 32, 0, 0]]), np.ones((1, 1, 32, 32)))
    assert st.finish() == []
    assert snapshot(out / "p.tif") == before and os.listdir(out) == ["p.tif"], "no spool, no partial file"


@pytest.mark.parametrize("kind", KINDS)
def test_a_target_that_becomes_not_a_regular_file_is_refused_at_the_rename(tmp_path, kind):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir(), elsewhere.mkdir()
    (out / "p.tif").write_bytes(b"an older output")  # a regular file is replaced
    st = cogfeed.Stitcher(made_up("a.tif", width=64), out=out / "p.tif", blend="mean", patch_size=32, tile_size=16)
    st.add(np.array([[0, 0, 0, 32, 32, 0, 0]]), np.ones((1, 1, 32, 32)))
    os.unlink(out / "p.tif")
    what = not_regular(kind, out / "p.tif", elsewhere)
    before = snapshot(out / "p.tif")
    with pytest.raises(cogfeed.InvalidRequest, match=f"is a {what}, not a regular file"):
        st.add(np.array([[0, 32, 0, 32, 32, 0, 0]]), np.ones((1, 1, 32, 32)))
    assert snapshot(out / "p.tif") == before and os.listdir(out) == ["p.tif"], "no spool, no partial file"
    if kind == "link to a file":
        assert (elsewhere / "file.tif").read_bytes() == b"precious"


def test_a_regular_target_is_replaced(tmp_path):
    (tmp_path / "p.tif").write_bytes(b"an older output")
    with cogfeed.Stitcher(made_up("a.tif"), out=tmp_path / "p.tif", patch_size=32, tile_size=16) as st:
        st.add(np.array([[0, 0, 0, 32, 32, 0, 0]]), np.ones((1, 1, 32, 32)))
    assert st.finish() == [str(tmp_path / "p.tif")] and os.listdir(tmp_path) == ["p.tif"]
    assert (tmp_path / "p.tif").read_bytes()[:4] == b"II*\0"


def test_two_scenes_onto_one_file_are_refused(tmp_path):
    window, pred = [0, 0, 0, 32, 32, 0, 0], np.ones((1, 1, 32, 32))
    # "{scene}" gives both the same stem: the second scene is refused before it opens, the
    # first one's file stays as written.
    st = cogfeed.Stitcher(made_up("x/y.tif", "x_y.TIFF"), out=tmp_path / "{scene}.tif", patch_size=32, tile_size=16)
    st.add(np.array([window]), pred)
    written = (tmp_path / "x_y.tif").read_bytes()
    clash = f"scenes 0 and 1 would both be written to {str(tmp_path / 'x_y.tif')!r}"
    with pytest.raises(ValueError, match=re.escape(clash)):
        st.add(np.array([[1, *window[1:]]]), pred * 2)
    assert st.finish() == [str(tmp_path / "x_y.tif")] and (tmp_path / "x_y.tif").read_bytes() == written
    assert os.listdir(tmp_path) == ["x_y.tif"]
    # No placeholder: the second scene to arrive is refused, naming both.
    st = cogfeed.Stitcher(made_up("a.tif", "b.tif"), out=tmp_path / "one.tif", patch_size=32, tile_size=16)
    st.add(np.array([[1, *window[1:]]]), pred)
    with pytest.raises(ValueError, match=r"scenes 1 and 0 arrive but out=.*one\.tif.* no '\{scene\}' placeholder"):
        st.add(np.array([window]), pred)
    assert sorted(os.listdir(tmp_path)) == ["one.tif", "x_y.tif"]


@pytest.mark.parametrize("blend", ["mean", "cosine", "center"])
def test_non_finite_predictions_do_not_erase_finite_ones(gdal_read, tmp_path, blend):
    """Two windows overlap over half of each. The first is non-finite (NaN, +inf, -inf) in
    band 0 but where its quarter is finite; band 1 is finite everywhere, in both windows."""
    windows = np.array([[0, 0, 0, 32, 32, 0, 0], [0, 16, 0, 32, 32, 0, 0]])
    preds = np.stack([np.ones((2, 32, 32)), np.full((2, 32, 32), 5.0)])
    preds[1, 1] = 3.0
    preds[0, 0, :8], preds[0, 0, 8:16], preds[0, 0, 16:] = np.nan, np.inf, -np.inf
    preds[0, 0, 24:, 24:] = 7.0  # a finite part, in the overlap
    st = cogfeed.Stitcher(made_up("a.tif", width=48), out=tmp_path / "p.tif", blend=blend, patch_size=32, stride=16,
                          tile_size=16)
    st.add(windows, preds)
    assert st.incomplete_tiles == 0 and os.listdir(tmp_path) == ["p.tif"]
    (r,) = gdal_read([tmp_path / "p.tif"])
    expected = blend_reference([(0, 0), (0, 16)], list(preds), 32, 48, blend)
    got = r["levels"][0]
    assert_pixels(got, expected)
    # Band 0: the second window's 5 where it is the only finite one, NaN (nodata) where no
    # finite value landed; the finite quarter of the first blends as usual.
    assert np.isnan(got[0, :, :16]).all() and np.isfinite(got[0, :, 16:]).all() and np.isfinite(got[1]).all()
    assert (got[0, :24, 16:] == 5).all() and (got[0, 24:, 16:24] == 5).all() and (got[0, :, 32:] == 5).all()
    # Band 1 is what it is without band 0.
    assert_pixels(got[1:], blend_reference([(0, 0), (0, 16)], list(preds[:, 1:]), 32, 48, blend))
    for level in r["levels"][1:]:
        expected = overview_reference(expected)
        assert_pixels(level, expected)


def test_a_refusal_at_finish_writes_the_other_scenes_and_leaves_no_spool(tmp_path):
    st = cogfeed.Stitcher(made_up("a.tif", "b.tif", width=64), out=tmp_path / "{scene}.tif", patch_size=32,
                          tile_size=16)
    for scene in (0, 1):
        st.add(np.array([[scene, 0, 0, 32, 32, 0, 0]]), np.ones((1, 1, 32, 32)))
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".spool")]) == 2
    os.mkfifo(tmp_path / "a.tif")
    with pytest.warns(UserWarning, match="lacked windows"), pytest.raises(cogfeed.InvalidRequest, match="is a fifo"):
        st.finish()
    assert sorted(os.listdir(tmp_path)) == ["a.tif", "b.tif"] and stat.S_ISFIFO(os.lstat(tmp_path / "a.tif").st_mode)
    assert st.finish() == [str(tmp_path / "b.tif")]
