"""Pictures of batches: `preview(batch)` is the picture `cogfeed-client preview` writes, as a
numpy ``uint8`` array ``[height, width, 3]`` (show it with ``plt.imshow(img)``; nothing here
needs matplotlib).

This module owns the Python side of the picture: which layer and bands make a batch's
composite, which layer is overlaid as classes and what no data is, each sample's caption,
and the drawing (percentile stretch, grid layout, enlargement, overlay, captions in 8 x 8
glyphs, legend). It mirrors cogfeed-render (``client/render/src/lib.rs`` and ``batch.rs``)
rule for rule, so the same batch and options give the same picture pixel for pixel; a
change to one side is a change to both (``tests/test_preview.py`` compares them). The
arithmetic follows the Rust: samples become float32 (no data and NaN as NaN), the stretch
runs in float64 on those float32 values, class numbers are the float32 values truncated to
int64 (saturating, NaN as 0).
"""

import math
import re
from itertools import islice
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from ._font8x8 import FIRST, GLYPHS

#: Pixels around the picture and between cells.
MARGIN = 8
#: Pixels between the panels of one cell.
GAP = 4
#: Height of one caption or legend line (8 px glyphs, 2 px leading).
LINE = 10
#: Smallest drawn side a sample is enlarged to (by an integer factor).
MIN_SIDE = 128
BACKGROUND = (24, 24, 24)
TEXT = (230, 230, 230)
#: Classes listed in the legend at most.
MAX_LEGEND = 32
#: Largest picture drawn, in pixels.
MAX_PIXELS = 64 << 20
#: Class colours, ``class % 20`` (the "tab20" qualitative palette).
PALETTE = np.array([
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
    (174, 199, 232), (255, 187, 120), (152, 223, 138), (255, 152, 150), (197, 176, 213),
    (196, 156, 148), (247, 182, 210), (199, 199, 199), (219, 219, 141), (158, 218, 229),
], dtype=np.uint8)

#: Tensor dtypes that are drawn (others: stream them as native or float32).
DRAWN_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "float64")
#: The composite's default bands, when the layer has them all.
DEFAULT_RGB = ("B04", "B03", "B02")

#: Glyph pixels, [95, 8, 8] bool: bit c of row byte r is column c (LSB leftmost).
_GLYPHS = (np.array(GLYPHS, dtype=np.uint8)[:, :, None] >> np.arange(8, dtype=np.uint8) & 1).astype(bool)
#: What Rust's `str::trim` removes (Unicode White_Space), unlike Python's `str.strip`.
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"
#: A 1-based channel number as Rust's `str::parse::<usize>` accepts it.
_NUMBER = re.compile(r"\+?[0-9]+")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _error(message):
    return ValueError(f"preview: {message}")


# --- From a batch to what is drawn (batch.rs) ----------------------------------------------


def _arrays(batch):
    """The batch's arrays by name, in the Rust client's order: the composite candidate first
    (the first layer's name with `batch.image`, else "image"), then `label`, then the other
    layers."""
    # Time layers [B, T, C, H, W] are drawn at their last step (the drawn date for "latest").
    layers = [(n, a[:, -1] if a.ndim == 5 else a) for n, a in (getattr(batch, "layers", None) or {}).items()]
    out = []
    image = batch.image
    if image is not None and image.ndim == 5:
        image = image[:, -1]
    if image is not None:
        out.append((layers[0][0] if layers else "image", image))
    if batch.label is not None:
        out.append(("label", batch.label))
    out.extend(layers[1:])
    return out


def _find(arrays, name):
    for n, a in arrays:
        if n == name:
            return a
    raise _error(f"no layer {name!r} in the batch")


def _layer_info(info, name):
    return next((l for l in getattr(info, "layers", ()) if l.name == name), None)


def _dims(a):
    """[B, C, H, W] of an array ([B, H, W] is one channel)."""
    if a.ndim == 4:
        return tuple(int(d) for d in a.shape)
    if a.ndim == 3:
        b, h, w = a.shape
        return int(b), 1, int(h), int(w)
    raise _error(f"cannot draw a tensor of shape {list(a.shape)}")


def _band_names(rgb):
    """`rgb` as the CLI's list of strings: None/empty for the default, a comma-separated
    string, or names and 1-based channel numbers."""
    if rgb is None:
        return []
    if isinstance(rgb, str):
        return rgb.split(",")
    if isinstance(rgb, (int, np.integer)):
        return [str(int(rgb))]
    return [str(int(b)) if isinstance(b, (int, np.integer)) else str(b) for b in rgb]


def pick_bands(rgb, names, channels):
    """The composite's 0-based channels in a layer of `channels` whose assets are `names`."""
    rgb = _band_names(rgb)
    if not rgb:
        default = [names.index(n) for n in DEFAULT_RGB if n in names and names.index(n) < channels]
        if len(default) == 3:
            return default
        return [0, 1, 2] if channels >= 3 else [0]
    if len(rgb) not in (1, 3):
        raise _error(f"give 1 or 3 bands, not {len(rgb)}")
    picked = []
    for b in rgb:
        if b in names and names.index(b) < channels:
            picked.append(names.index(b))
        elif _NUMBER.fullmatch(b) and 1 <= int(b) <= channels:
            picked.append(int(b) - 1)
        else:
            known = ", ".join(names) if names else "unnamed"
            raise _error(f"no band {b!r} (bands: {known}; or 1..={channels})")
    return picked


def _float32(a, nodata=None):
    """`a` as float32 with no data (values equal to `nodata`, compared in float64) and NaN
    as NaN."""
    name = a.dtype.name
    if (a.dtype.metadata or {}).get("cogfeed") == "bfloat16":
        name = "bfloat16"
    if a.dtype.kind not in "iuf" or name not in DRAWN_DTYPES:
        raise _error(f"{name} layers are not drawn (stream them as native or float32)")
    wide = a.astype(np.float64)
    missing = np.isnan(wide)
    if nodata is not None:
        missing |= wide == nodata
    with np.errstate(over="ignore", invalid="ignore"):
        out = wide.astype(np.float32)
    out[missing] = np.nan
    return out


def _saturating_i64(x):
    """Rust's `x as i64` of a float: truncated, saturating, NaN as 0."""
    if math.isnan(x):
        return 0
    if x >= 2.0 ** 63:
        return _I64_MAX
    if x <= -(2.0 ** 63):
        return _I64_MIN
    return int(x)


def _saturating_i64_array(v):
    """`_saturating_i64` of every value of a float array, as int64."""
    v = np.trunc(np.nan_to_num(np.asarray(v, dtype=np.float64), nan=0.0))
    inside = np.clip(v, -(2.0 ** 63), np.nextafter(2.0 ** 63, 0))
    return np.where(v >= 2.0 ** 63, _I64_MAX, inside.astype(np.int64))


def _composite(arrays, info, layer, rgb):
    """(name, [k, B, H, W] float32 channels) of the composite."""
    if layer is not None:
        name, a = layer, _find(arrays, layer)
    elif arrays:
        name, a = arrays[0]
    else:
        raise _error("the batch holds no arrays")
    a = np.asarray(a)
    _, channels, _, _ = _dims(a)
    li = _layer_info(info, name)
    picked = pick_bands(rgb, list(li.assets) if li is not None else [], channels)
    if any(c >= channels for c in picked):
        raise _error(f"the layer info of {name!r} names a band beyond its {channels} channels")
    a4 = a.reshape(a.shape[0], channels, a.shape[-2], a.shape[-1])
    values = _float32(a4[:, picked], li.nodata if li is not None else None)
    return name, np.moveaxis(values, 1, 0)


def _classes(arrays, info, classes, composite, samples):
    """(values [B, Hm, Wm] int64, nodata or None) of the class layer, or None."""
    if classes == "":
        return None
    if classes is None:
        classes = next((n for n, _ in arrays if n == "label" and n != composite), None)
        if classes is None:
            return None
    a = np.asarray(_find(arrays, classes))
    cb, channels, ch, cw = _dims(a)
    if cb != samples:
        raise _error(f"{classes} holds {cb} samples, not {samples}")
    values = _float32(a)
    if channels == 0:
        raise _error(f"{classes} has no channels")
    first = values.reshape(cb, channels, ch, cw)[:, 0]
    li = _layer_info(info, classes)
    return _saturating_i64_array(first), (_saturating_i64(li.nodata) if li is not None else None)


def _trim(s):
    return s.strip(_WHITE_SPACE)


def _fixed0(x):
    """Rust's `{:.0}` of an f64."""
    return "NaN" if math.isnan(x) else f"{x:.0f}"


def caption(info, batch, i):
    """Caption lines of sample `i`: map-space samples their drawn Item (else the first; `+n`
    for the items beyond one), date and CRS, upper-left corner and width; scene samples
    their scene name and window."""
    meta = getattr(batch, "meta", None) or []
    if i < len(meta):
        m = meta[i]
        first = getattr(m, "drawn", "") or (m.items[0] if m.items else "")
        if len(m.items) > 1:
            first += f" +{len(m.items) - 1}"
        date = (m.datetime or "")[:10]
        lines = [first, _trim(f"{date} {m.crs}")]
        if len(m.bounds) == 4:
            x0, _, x1, y1 = (float(v) for v in m.bounds)
            lines.append(f"{_fixed0(x0)},{_fixed0(y1)} {_fixed0(x1 - x0)}m")
        return lines
    windows = batch.windows
    if windows is not None and i < len(windows):
        scene, col, row, _, _, level = (int(v) for v in windows[i][:6])
        scenes = getattr(info, "scenes", ())
        name = scenes[scene].name if 0 <= scene < len(scenes) else f"scene {scene}"
        return [name, f"col {col} row {row} L{level}"]
    return []


# --- Drawing (lib.rs) ------------------------------------------------------------------------


def _rank(p, n):
    """The index of percentile `p` among `n` sorted values (the lower rank)."""
    p = float(p)
    if math.isnan(p):
        return 0
    return min(math.floor((min(max(p, 0.0), 100.0) / 100.0) * float(n - 1)), n - 1)


def stretch_bounds(values, percentiles):
    """(lo, hi) of one channel: its finite values at the percentile ranks, or None."""
    v = np.asarray(values, dtype=np.float32).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    ranks = [_rank(p, v.size) for p in percentiles]
    part = np.partition(v, sorted(set(ranks)))
    return float(part[ranks[0]]), float(part[ranks[1]])


def stretch(values, bounds):
    """Values on the 0-255 scale between `bounds` (0 for no data, or when hi <= lo)."""
    v = np.asarray(values, dtype=np.float32).astype(np.float64)
    out = np.zeros(v.shape, dtype=np.uint8)
    if bounds is None or bounds[1] <= bounds[0]:
        return out
    lo, hi = bounds
    finite = np.isfinite(v)
    t = np.floor((v[finite] - lo) / (hi - lo) * 255.0 + 0.5)
    out[finite] = np.clip(t, 0.0, 255.0).astype(np.uint8)
    return out


def scale_of(h, w):
    """The enlargement factor of an `h` x `w` sample."""
    return max(MIN_SIDE // max(h, w, 1), 1)


def colour_of(classes):
    """Palette colours of class numbers (an int or an array)."""
    return PALETTE[np.mod(classes, len(PALETTE))]


def _present(values, nodata):
    """Classes present, ascending, without nodata, at most MAX_LEGEND."""
    v = values.ravel()
    if nodata is not None:
        v = v[v != nodata]
    return [int(c) for c in np.unique(v)[:MAX_LEGEND]]


def _legend_layout(classes, width):
    """(class, x, row) of each legend entry: a swatch, 2 px, the number, 12 px to the next,
    wrapping at the picture's width."""
    out, x, row = [], MARGIN, 0
    for c in classes:
        w = 10 + 8 * len(str(c))
        if x > MARGIN and x + w > width - MARGIN:
            x, row = MARGIN, row + 1
        out.append((c, x, row))
        x += w + 12
    return out


def _fill(pic, x, y, mask, colour):
    """Sets the pixels of `mask` ([h, w] bool) from (x, y), clipped to the picture."""
    height, width = pic.shape[:2]
    if x >= width or y >= height:
        return
    region = pic[y:y + mask.shape[0], x:x + mask.shape[1]]
    region[mask[:region.shape[0], :region.shape[1]]] = colour


def _text(pic, x, y, text, max_chars=None):
    """Draws at most `max_chars` glyphs of `text` from (x, y); other than printable ASCII
    shows as '?'."""
    for k, ch in enumerate(islice(text, max_chars)):
        if x + k * 8 >= pic.shape[1]:
            break
        code = ord(ch) if " " <= ch <= "~" else ord("?")
        _fill(pic, x + k * 8, y, _GLYPHS[code - FIRST], TEXT)


def render(channels, percentiles=(2, 98), classes=None, captions=()):
    """The picture of `channels` ([1 or 3, B, H, W] float32, NaN = no data) with the class
    layer `classes` ((values [B, Hm, Wm] int64, nodata or None) or None) and caption lines
    per sample."""
    k, b, h, w = channels.shape
    if b == 0 or h == 0 or w == 0:
        raise _error("an empty batch has nothing to draw")
    if k not in (1, 3):
        raise _error(f"1 or 3 channels, not {k}")
    s = scale_of(h, w)
    ph, pw = h * s, w * s
    panels = 2 if classes is not None else 1
    cell_w = pw * panels + (panels - 1) * GAP
    lines = max((len(c) for c in captions), default=0)
    cell_h = ph + (2 + lines * LINE if lines else 0)
    cols = math.ceil(math.sqrt(b))
    rows = -(-b // cols)
    width = MARGIN + cols * (cell_w + MARGIN)
    legend = _legend_layout(_present(*classes), width) if classes is not None else []
    legend_rows = legend[-1][2] + 1 if legend else 0
    height = rows * (cell_h + MARGIN) + MARGIN + legend_rows * (LINE + 2) + (MARGIN if legend_rows else 0)
    if width * height > MAX_PIXELS:
        raise _error(f"the picture would be {width * height} pixels, more than {MAX_PIXELS}")
    if classes is not None and (classes[0].shape[1] == 0 or classes[0].shape[2] == 0):
        raise _error(f"the class layer holds {classes[0].size} values, not {b} x "
                     f"{classes[0].shape[1]} x {classes[0].shape[2]}")
    levels = np.stack([stretch(c, stretch_bounds(c, percentiles)) for c in channels], axis=-1)
    if k == 1:
        levels = np.repeat(levels, 3, axis=-1)  # [B, H, W, 3]
    pic = np.empty((height, width, 3), dtype=np.uint8)
    pic[:] = BACKGROUND
    sy, sx = np.arange(ph) * h // ph, np.arange(pw) * w // pw
    for i in range(b):
        x0 = MARGIN + (i % cols) * (cell_w + MARGIN)
        y0 = MARGIN + (i // cols) * (cell_h + MARGIN)
        panel = levels[i][sy][:, sx]
        pic[y0:y0 + ph, x0:x0 + pw] = panel
        if classes is not None:
            pic[y0:y0 + ph, x0 + pw + GAP:x0 + 2 * pw + GAP] = _overlay(panel, classes, i)
        for line, text in enumerate(captions[i] if i < len(captions) else ()):
            _text(pic, x0, y0 + ph + 2 + line * LINE, text, cell_w // 8)
    legend_y = MARGIN + rows * (cell_h + MARGIN)
    swatch = np.ones((8, 8), dtype=bool)
    for c, x, row in legend:
        y = legend_y + row * (LINE + 2)
        _fill(pic, x, y, swatch, colour_of(c))
        _text(pic, x + 10, y, str(c))
    return pic


def _overlay(panel, classes, i):
    """The panel ([ph, pw, 3]) blended with the palette colours of sample i's classes."""
    values, nodata = classes
    ph, pw = panel.shape[:2]
    _, mh, mw = values.shape
    cls = values[i][np.arange(ph) * mh // ph][:, np.arange(pw) * mw // pw]
    blended = ((panel.astype(np.uint16) + colour_of(cls) + 1) // 2).astype(np.uint8)
    if nodata is not None:
        blended[cls == nodata] = panel[cls == nodata]
    return blended


def preview(batch: Any, rgb: Union[str, int, Sequence[Union[str, int]], None] = None, info: Any = None,
            layer: Optional[str] = None, classes: Optional[str] = None,
            percentiles: Tuple[float, float] = (2, 98)) -> np.ndarray:
    """The picture of `batch` that `cogfeed-client preview` draws: uint8 [height, width, 3].

    - `rgb`: bands of the composite, asset names or 1-based channel numbers (1 or 3; a
      comma-separated string works too); None: B04/B03/B02 when the layer has them, else
      channels 1-3, else channel 1 in grey;
    - `info`: the dataset's `DatasetInfo` (asset names, nodata, scene names); default
      `batch.info`, which `Loader` batches carry;
    - `layer`: layer of the composite (default: the first);
    - `classes`: layer drawn as a class overlay (default: `label` when present; "" for none);
    - `percentiles`: (low, high) of the per-channel stretch over the whole batch.

    Raises ValueError where the Rust renderer refuses (no such layer or band, 2 bands, a
    dtype that is not drawn such as float16, an empty batch, a picture over 64 Mi pixels).
    """
    if info is None:
        info = getattr(batch, "info", None)
    if len(percentiles) != 2:
        raise _error(f"give 2 percentiles, not {len(percentiles)}")
    arrays = _arrays(batch)
    name, channels = _composite(arrays, info, layer, rgb)
    overlay = _classes(arrays, info, classes, name, channels.shape[1])
    captions = [caption(info, batch, i) for i in range(channels.shape[1])]
    return render(channels, percentiles, overlay, captions)
