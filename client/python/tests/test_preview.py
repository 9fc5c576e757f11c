"""`cogfeed.preview` against cogfeed-render: the same request through `cogfeed-client preview`
and through a Loader gives the same picture, pixel for pixel (map-space and scene datasets,
class overlays, grey composites, float data, explicit bands and percentiles); and without a
daemon, the stretch's rounding, the overlay's blend and the refusals."""

import struct
import subprocess
import zlib

import numpy as np
import pytest

import cogfeed
from cogfeed.preview import GAP, MARGIN, MAX_PIXELS, caption, render, scale_of, stretch, stretch_bounds
from cogfeed.v1 import feed_pb2 as pb


def decode_png(data):
    """[height, width, 3] uint8 of an 8-bit RGB, non-interlaced PNG (filters 0-4)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    width, height, depth, colour, _, _, interlace = header
    assert (depth, colour, interlace) == (8, 2, 0), header
    raw = zlib.decompress(b"".join(idat))
    stride, bpp = width * 3, 3
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        out[y] = unfilter(kind, line, prev, bpp)
        prev = out[y]
    return out.reshape(height, width, 3)


def unfilter(kind, line, prev, bpp):
    """One PNG scanline without its filter (`prev`: the previous one, unfiltered)."""
    if kind == 0:
        return line
    if kind == 1:  # Sub: a running sum per byte of the pixel, mod 256.
        return np.cumsum(line.reshape(-1, bpp), axis=0, dtype=np.uint8).ravel()
    if kind == 2:
        return line + prev
    assert kind in (3, 4), kind
    cur, up = bytearray(line), prev.tolist()
    for i in range(len(cur)):
        a, b = (cur[i - bpp] if i >= bpp else 0), up[i]
        guess = (a + b) // 2 if kind == 3 else paeth(a, b, up[i - bpp] if i >= bpp else 0)
        cur[i] = (cur[i] + guess) & 0xFF
    return np.frombuffer(bytes(cur), np.uint8)


def paeth(a, b, c):
    """PNG's Paeth predictor of a byte from its left, upper and upper-left neighbours."""
    p = a + b - c
    pa, pb_, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb_ and pa <= pc else b if pb_ <= pc else c


def encode_png(img, kinds):
    """An RGB PNG of `img` [H, W, 3] with filter `kinds[y % len(kinds)]` on row y."""
    height, width, _ = img.shape
    rows, prev = [], [0] * (width * 3)
    for y in range(height):
        kind, cur = kinds[y % len(kinds)], img[y].ravel().tolist()
        left = [0, 0, 0] + cur[:-3]
        upleft = [0, 0, 0] + prev[:-3]
        guess = [[0, a, b, (a + b) // 2, paeth(a, b, c)][kind] for a, b, c in zip(left, prev, upleft)]
        rows.append(bytes([kind] + [(x - g) & 0xFF for x, g in zip(cur, guess)]))
        prev = cur

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


def test_the_png_decoder_undoes_every_filter():
    img = np.random.default_rng(0).integers(0, 256, (12, 7, 3), dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(img, [0, 1, 2, 3, 4, 3, 4, 1, 0, 2])), img)


def cli_flags(loader):
    """`cogfeed-client` sampler flags of Loader keywords."""
    flags = []
    for key, value in loader.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, ",".join(map(str, value))]
        else:
            flags += [flag, str(value)]
    return flags


def preview_flags(options):
    """`cogfeed-client preview` flags of `preview` keywords."""
    flags = []
    for key, value in options.items():
        if key == "rgb":
            flags.append(f"--rgb={','.join(map(str, value))}")
        elif key == "percentiles":
            # "low,high", as the help says.
            flags += ["--percentiles", ",".join(map(str, value))]
        else:
            flags.append(f"--{key}={value}")
    return flags


BASE = {"sampler": "random", "seed": 0, "job": "cli"}

CASES = {
    "map-space, default layers": ("demo-stac", {"patch_size": 64, "batch_size": 9}, {}),
    "map-space, grey swir under labels": ("demo-stac", {"patch_size": 64, "batch_size": 4,
                                                        "layers": ["swir", "label"]}, {}),
    "map-space, one grey band": ("demo-stac", {"patch_size": 32, "batch_size": 5, "layers": ["swir"]}, {}),
    "map-space, chosen layer and bands, no classes": (
        "demo-stac", {"patch_size": 48, "batch_size": 3, "seed": 5},
        {"layer": "image", "rgb": ("B08", "B04", "B03"), "classes": ""}),
    "time series, last step, split": ("demo-series", {"patch_size": 64, "batch_size": 4, "split": "train"}, {}),
    "time series, sentinel-1 as grey": ("demo-series", {"patch_size": 32, "batch_size": 3,
                                                        "layers": ["s1_desc", "label"]}, {"rgb": (1,)}),
    "scene, labels": ("demo", {"patch_size": 128, "batch_size": 6, "labels": True}, {}),
    "scene, channel numbers, full range": ("demo", {"patch_size": 64, "batch_size": 4},
                                           {"rgb": (3, 2, 1), "percentiles": (0, 100)}),
    "scene, float grid, grey": ("demo", {"patch_size": 200, "batch_size": 2, "sampler": "grid", "dtype": "float32",
                                         "normalize": True, "labels": True},
                                {"rgb": (2,), "percentiles": (7.5, 91)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_picture_is_the_rust_clients_pixel_for_pixel(case, daemon, rust_client, tmp_path):
    dataset, loader, options = CASES[case]
    loader = {**BASE, **loader}
    out = tmp_path / "grid.png"
    cli = subprocess.run([rust_client, "--server", daemon.address, "preview", "--dataset", dataset,
                          *cli_flags(loader), "--max-batches", "1", *preview_flags(options), "--out", str(out)],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    expected = decode_png(out.read_bytes())
    (batch,) = list(cogfeed.Loader(daemon.address, dataset, max_batches=1, **loader))
    assert batch.info is not None and batch.info.name == dataset
    got = cogfeed.preview(batch, **options)
    assert got.dtype == np.uint8 and got.shape == expected.shape
    assert np.array_equal(got, expected), f"{np.count_nonzero((got != expected).any(-1))} pixels differ"


def test_an_explicit_info_and_band_names_as_a_string(daemon):
    (batch,) = list(cogfeed.Loader(daemon.address, "demo-stac", patch_size=32, batch_size=2, max_batches=1))
    info, batch.info = batch.info, None
    assert np.array_equal(cogfeed.preview(batch, info=info, rgb="B04,B03,B02"), cogfeed.preview(batch, info=info))
    with pytest.raises(ValueError, match="no band 'B99'"):
        cogfeed.preview(batch, info=info, rgb="B99")


# --- Without a daemon ---------------------------------------------------------------------


def test_stretch_takes_the_lower_rank_and_rounds_half_up():
    v = np.arange(101, dtype=np.float32)
    assert stretch_bounds(v, (2, 98)) == (2.0, 98.0)
    assert stretch_bounds(np.r_[v, np.nan, np.inf], (2, 98)) == (2.0, 98.0)  # non-finite left out
    assert stretch_bounds(np.arange(10, dtype=np.float32), (50, 100)) == (4.0, 9.0)  # floor(0.5 * 9) = 4
    assert list(stretch(np.array([2, 98, 50, np.nan, -1e9, 1e9], np.float32), (2.0, 98.0))) == [0, 255, 128, 0, 0, 255]
    # (v - lo) / (hi - lo) * 255 + 0.5 exactly on a half: 0.5 / 255 * 255 rounds up ...
    assert stretch(np.float32(0.5), (0.0, 255.0)) == 1
    assert stretch(np.float32(1.5), (0.0, 255.0)) == 2  # ... not to even
    assert list(stretch(np.float32([5, 5]), (3.0, 3.0))) == [0, 0]  # hi <= lo
    assert stretch_bounds(np.float32([np.nan]), (2, 98)) is None


def hand_batch(image, label=None, layers=None, **kw):
    b = image.shape[0]
    return cogfeed.Batch(image=image, label=label, windows=np.zeros((b, 7), np.int64), epoch=0, index=0, cursor=b,
                         layers=layers or {}, **kw)


def test_the_class_overlay_blends_the_palette_and_skips_nodata():
    image = np.zeros((1, 1, 2, 2), np.uint16)
    label = np.array([[[[1, 255]]]], np.uint8)  # [1, 1, 1, 2]: one class row under a 2 x 2 image
    info = pb.DatasetInfo(layers=[pb.LayerInfo(name="img", assets=["B01"]),
                                  pb.LayerInfo(name="label", assets=["L"], nodata=255)])
    batch = hand_batch(image, layers={"img": image, "label": label}, info=info)
    pic = cogfeed.preview(batch)
    s = scale_of(2, 2)
    ox = MARGIN + 2 * s + GAP
    assert list(pic[MARGIN, ox]) == [128, 64, 7]  # (0 + tab20[1] + 1) // 2
    assert list(pic[MARGIN, ox + 2 * s - 1]) == [0, 0, 0]  # nodata: the composite itself
    assert list(pic[0, 0]) == [24, 24, 24]
    # Class 1 in the legend, below the cells; class 255 (nodata) not.
    legend_y = pic.shape[0] - MARGIN - 10 - 2
    assert list(pic[legend_y, MARGIN]) == [255, 127, 14]
    # Without info, 255 is a class too: two legend entries.
    assert list(cogfeed.preview(batch, info=pb.DatasetInfo())[MARGIN, ox + 2 * s - 1]) == [
        (0 + 196 + 1) // 2, (0 + 156 + 1) // 2, (0 + 148 + 1) // 2]  # tab20[255 % 20]


def test_captions_follow_the_rust_text_rules():
    meta = cogfeed.SampleMeta(("S2A_1", "S2B_2", "S2C_3"), "2024-06-03T10:00:00Z", "EPSG:32632",
                              (500000.5, 0.0, 500320.5, 2.5), 10.0, False)
    batch = hand_batch(np.zeros((2, 1, 4, 4), np.uint8), meta=[meta])
    batch.windows[1] = (7, 12, 34, 4, 4, 1, 0)
    info = pb.DatasetInfo(scenes=[pb.SceneInfo(name=f"s{i}") for i in range(3)])
    assert caption(info, batch, 0) == ["S2A_1 +2", "2024-06-03 EPSG:32632", "500000,2 320m"]  # half to even
    assert caption(info, batch, 1) == ["scene 7", "col 12 row 34 L1"]
    batch.windows[1, 0] = 2
    assert caption(info, batch, 1) == ["s2", "col 12 row 34 L1"]
    no_date = meta._replace(datetime=None, crs="", bounds=(-0.4, 0, 1, float("nan")))
    assert caption(info, hand_batch(batch.image[:1], meta=[no_date]), 0) == ["S2A_1 +2", "", "-0,NaN 1m"]
    drawn = meta._replace(drawn="S2B_2", items=("S2B_2",), bounds=(1.0, 2.0))  # the drawn item; no footprint
    assert caption(info, hand_batch(batch.image[:1], meta=[drawn]), 0) == ["S2B_2", "2024-06-03 EPSG:32632"]


def test_refusals_are_value_errors():
    image = np.zeros((2, 4, 8, 8), np.uint16)
    with pytest.raises(ValueError, match="1 or 3 bands, not 2"):
        cogfeed.preview(hand_batch(image), rgb=(1, 2))
    with pytest.raises(ValueError, match="no band '5'"):
        cogfeed.preview(hand_batch(image), rgb=(5,))
    with pytest.raises(ValueError, match="no layer 'swir'"):
        cogfeed.preview(hand_batch(image), layer="swir")
    with pytest.raises(ValueError, match="float16 layers are not drawn"):
        cogfeed.preview(hand_batch(image.astype(np.float16)))
    with pytest.raises(ValueError, match="empty batch"):
        cogfeed.preview(hand_batch(image[:0]))
    with pytest.raises(ValueError, match=f"more than {MAX_PIXELS}"):
        render(np.broadcast_to(np.float32(0), (1, 1, 8192, 8192)))  # 8208 x 8208 pixels
    with pytest.raises(ValueError, match="cannot draw a tensor of shape"):
        cogfeed.preview(hand_batch(image[0, 0]))
    label = np.zeros((3, 8, 8), np.uint8)
    with pytest.raises(ValueError, match="label holds 3 samples, not 2"):
        cogfeed.preview(hand_batch(image, label=label))
    # bfloat16 arrives as uint16 bits, marked so; the CLI refuses it too.
    from cogfeed._tensor import numpy_dtype
    with pytest.raises(ValueError, match="bfloat16 layers are not drawn"):
        cogfeed.preview(hand_batch(image.view(numpy_dtype("bfloat16"))))
