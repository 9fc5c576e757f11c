"""Stitching model predictions over a grid stream back into georeferenced COGs (`Stitcher`).

This module owns the way back from windows to maps: where each window of a `sampler="grid"`
stream lands on an output grid (a level of a scene, or a layer of a map-space scene), how
overlapping predictions are blended, when an output tile has received every window that
touches it, and the bounded-memory pipeline from float64 accumulators to compressed tiles
in an on-disk spool to the final file. The file format itself is `cogfeed._cog`'s.

Memory: a tile's accumulators exist only between the first and the last window touching
it; then the tile is blended, compressed and appended to the spool, and its 2 x 2 decimated
quarter waits for its siblings to make the overview tile above it. With a grid stream
(scenes, then rows, then columns) the open tiles are those of the rows of tiles that one row
of windows spans: at most ceil(patch / tile_size) + 1 rows of them.

Output paths: only a missing path or a regular file is written (replaced); anything else at
an output path (a directory, a FIFO, a device, a socket, or a symbolic link, whatever it
points to) is refused with an `InvalidRequest` and left alone (`check_target`). Two scenes
mapped to one path are refused when the second one's first window arrives.

Non-finite predictions (NaN, +inf, -inf) are left out of the blend, band by band and pixel
by pixel (their weight does not count either): a pixel keeps what the finite values over it
give, and is NaN (nodata) where none arrived, like a pixel that no window covered.
"""

import contextlib
import math
import os
import re
import stat
import tempfile
import warnings
import weakref
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _cog
from ._errors import InvalidRequest

#: Blend modes: "mean" (weight 1), "cosine" (sin² taper from each window's centre to its
#: edges) and "center" (each pixel from the window whose centre is nearest, no mixing).
BLENDS = ("mean", "cosine", "center")
#: Placeholder of `out` replaced by the scene's name.
PLACEHOLDER = "{scene}"


def grid_steps(size, patch, stride):
    """Grid windows along an axis of `size` pixels: the server's rule (enough to reach the
    last pixel, none starting past it)."""
    if size <= patch:
        return 1
    return min((size - patch + stride - 1) // stride + 1, (size - 1) // stride + 1)


def scene_stem(name):
    """A scene's name as it replaces the placeholder: a .tif/.tiff extension dropped and
    path separators made underscores (names of map-space scenes are item ids, which may
    hold dots that are not extensions)."""
    return re.sub(r"\.tiff?$", "", name, flags=re.IGNORECASE).replace("/", "_").replace("\\", "_")


def _kind(mode):
    """What a file of st_mode `mode` is, in words."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "fifo"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link")):
        if test(mode):
            return name
    return f"file of mode {mode:o}"


def check_target(path: str) -> None:
    """Raises `InvalidRequest` unless `path` is missing or a regular file (not followed).

    Writing an output renames a finished file over its path: what is there is replaced, not
    written through. That is right for an older output, and wrong for anything else: a
    directory, a FIFO, a device (as root, /dev/full would go), a socket. Symbolic links are
    refused too, whatever they point to: the rename would replace the link itself and leave
    its target as it was, which is not what a link there asks for. Parent directories may
    be links. The message names the path and what is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    what = _kind(mode)
    if stat.S_ISLNK(mode):
        try:
            what = f"symbolic link to a {_kind(os.stat(path).st_mode)}"
        except FileNotFoundError:
            what = "dangling symbolic link"
        except OSError as e:  # a loop, a target it may not reach
            what = f"symbolic link ({e.strerror})"
    raise InvalidRequest(f"output path {path!r} is a {what}, not a regular file: refusing to replace it")


def _touching(count, step, span, size, tile_size):
    """Per tile along an axis: how many of the `count` windows (starting every `step`
    output pixels, `span` wide) touch it. Every grid window starts inside the output: its
    first pixel is inside the scene."""
    touching = np.zeros(-(-size // tile_size), dtype=np.int64)
    for start in range(0, count * step, step):
        touching[start // tile_size:(min(start + span, size) - 1) // tile_size + 1] += 1
    return touching


class _Weighted:
    """Σ w·p and Σ w over one tile (blends "mean" and "cosine"), over finite values only.

    Σ w is one plane [h, w] while every value is finite; the first non-finite value makes it
    one per band [K, h, w] (its weight counts in none of the band's sums)."""

    def __init__(self, bands, height, width):
        self.num = np.zeros((bands, height, width))
        self.den = np.zeros((height, width))

    def add(self, ys, xs, pred, weight, r0, c0):
        finite = np.isfinite(pred)
        if finite.all():
            self.num[:, ys, xs] += weight * pred
            self.den[..., ys, xs] += weight
            return
        if self.den.ndim == 2:
            self.den = np.repeat(self.den[None], self.num.shape[0], axis=0)
        self.num[:, ys, xs] += weight * np.where(finite, pred, 0)
        self.den[:, ys, xs] += weight * finite

    def values(self):
        out = np.full(self.num.shape, np.nan)
        den = np.broadcast_to(self.den, self.num.shape)
        covered = den > 0
        out[covered] = self.num[covered] / den[covered]
        return out.astype(np.float32)


class _Center:
    """Per pixel, the prediction of the window with the smallest (2 x Chebyshev distance to
    its centre, origin row, origin column) (blend "center"), among the windows whose value
    there is finite.

    The key is one per pixel [3, h, w] while every value is finite; the first non-finite
    value makes it one per band and pixel [3, K, h, w] (a band's non-finite value is skipped)."""

    def __init__(self, bands, height, width):
        self.value = np.full((bands, height, width), np.nan)
        self.key = np.full((3, height, width), np.iinfo(np.int64).max, dtype=np.int64)

    def add(self, ys, xs, pred, distance, r0, c0):
        finite = np.isfinite(pred)
        if self.key.ndim == 3 and finite.all():
            d, r, c = self.key[:, ys, xs]
            better = (distance < d) | ((distance == d) & ((r0 < r) | ((r0 == r) & (c0 < c))))
            d[better], r[better], c[better] = distance[better], r0, c0
            self.value[:, ys, xs][:, better] = pred[:, better]
            return
        if self.key.ndim == 3:
            self.key = np.repeat(self.key[:, None], self.value.shape[0], axis=1)
        d, r, c = self.key[:, :, ys, xs]
        distance = np.broadcast_to(distance, d.shape)
        better = finite & ((distance < d) | ((distance == d) & ((r0 < r) | ((r0 == r) & (c0 < c)))))
        d[better], r[better], c[better] = distance[better], r0, c0
        self.value[:, ys, xs][better] = pred[better]

    def values(self):
        return self.value.astype(np.float32)


class _Scene:
    """The output of one scene: its grid, accumulators of open tiles, the spool of finished
    tiles and the quarters waiting for their overview tile."""

    def __init__(self, stitcher, index, path):
        st = stitcher
        scene = st.info.scenes[index]
        self.path, self.tile_size, self.bands = path, st.tile_size, st.bands
        self.kernel, self.acc_type = st._kernel, (_Center if st.blend == "center" else _Weighted)
        ref = scene.levels[0 if st.map_space else st.level]
        if st.map_space:
            f = st._factor
            self.width, self.height = math.ceil(ref.width * f - 1e-9), math.ceil(ref.height * f - 1e-9)
            gt = list(scene.geotransform)
            if gt:
                gt = [gt[0], gt[1] / f, gt[2] / f, gt[3], gt[4] / f, gt[5] / f]
        else:
            self.width, self.height = ref.width, ref.height
            gt = list(scene.geotransform)
            if gt:
                # A pixel of this level spans sx level-0 columns and sy level-0 rows.
                sx, sy = scene.levels[0].width / ref.width, scene.levels[0].height / ref.height
                gt = [gt[0], gt[1] * sx, gt[2] * sy, gt[3], gt[4] * sx, gt[5] * sy]
        self.geotransform, self.epsg = (gt or None), _cog.parse_epsg(scene.crs)
        self.span, self.step = st._pred_size, st._out_stride
        self.nx = grid_steps(ref.width, st.patch_size, st.stride)
        self.ny = grid_steps(ref.height, st.patch_size, st.stride)
        self.received = np.zeros((self.ny, self.nx), dtype=bool)
        self.sizes = _cog.overview_sizes(self.width, self.height, self.tile_size)
        self.tiles = [(-(-h // self.tile_size), -(-w // self.tile_size)) for w, h in self.sizes]
        t = self.tile_size
        self.needed = np.outer(_touching(self.ny, self.step, self.span, self.height, t),
                               _touching(self.nx, self.step, self.span, self.width, t))
        self.arrived = np.zeros_like(self.needed)
        self.done = np.zeros(self.needed.shape, dtype=bool)
        self.open = {}  # (ty, tx) -> accumulator of a level-0 tile
        self.quarters = [{} for _ in self.sizes]  # level -> (ty, tx) -> {(qy, qx): quarter}
        self.blocks = [[None] * (ty * tx) for ty, tx in self.tiles]
        fd, spool_path = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                          prefix=f".{os.path.basename(path)}.", suffix=".spool")
        self.spool = os.fdopen(fd, "w+b")
        # Removes the spool when the scene is written, dropped, or garbage collected.
        self.drop = weakref.finalize(self, _remove, self.spool, spool_path)

    @property
    def complete(self):
        return bool(self.done.all())

    def add(self, ix, iy, pred, on_open):
        """Adds the prediction [K, h, w] of grid window (ix, iy); a repeated window is ignored.
        Calls `on_open()` for each tile accumulator it opens."""
        if self.received[iy, ix]:
            return
        self.received[iy, ix] = True
        r0, c0, t = iy * self.step, ix * self.step, self.tile_size
        r1, c1 = min(r0 + self.span, self.height), min(c0 + self.span, self.width)
        for ty in range(r0 // t, (r1 - 1) // t + 1):
            for tx in range(c0 // t, (c1 - 1) // t + 1):
                acc = self.open.get((ty, tx))
                if acc is None:
                    acc = self.open[ty, tx] = self.acc_type(self.bands, *self._tile_shape(0, ty, tx))
                    on_open()
                # The overlap, in tile and in prediction coordinates.
                y0, y1 = max(r0, ty * t), min(r1, (ty + 1) * t)
                x0, x1 = max(c0, tx * t), min(c1, (tx + 1) * t)
                ys, xs = slice(y0 - ty * t, y1 - ty * t), slice(x0 - tx * t, x1 - tx * t)
                py, px = slice(y0 - r0, y1 - r0), slice(x0 - c0, x1 - c0)
                acc.add(ys, xs, pred[:, py, px], self.kernel[py, px], r0, c0)
                self.arrived[ty, tx] += 1
                if self.arrived[ty, tx] == self.needed[ty, tx]:
                    self.close(ty, tx)

    def close(self, ty, tx):
        """Finishes level-0 tile (ty, tx) with what it has (all NaN if nothing arrived)."""
        acc = self.open.pop((ty, tx), None)
        if acc is None:
            values = np.full((self.bands, *self._tile_shape(0, ty, tx)), np.nan, dtype=np.float32)
        else:
            values = acc.values()
        self.done[ty, tx] = True
        self._emit(0, ty, tx, values)

    def _tile_shape(self, level, ty, tx):
        """(height, width) of a tile of a level (edge tiles are partial)."""
        width, height = self.sizes[level]
        t = self.tile_size
        return min(t, height - ty * t), min(t, width - tx * t)

    def _emit(self, level, ty, tx, values):
        """Spools a finished tile and hands its quarter to the overview tile above it."""
        data = _cog.encode_tile(values, self.tile_size)
        self.spool.seek(0, os.SEEK_END)
        self.blocks[level][ty * self.tiles[level][1] + tx] = (self.spool.tell(), len(data))
        self.spool.write(data)
        if level + 1 == len(self.sizes):
            return
        parent = (ty // 2, tx // 2)
        waiting = self.quarters[level + 1].setdefault(parent, {})
        waiting[ty % 2, tx % 2] = _cog.decimate(values)
        rows, cols = self.tiles[level]
        if len(waiting) == min(2, rows - 2 * parent[0]) * min(2, cols - 2 * parent[1]):
            del self.quarters[level + 1][parent]
            half = self.tile_size // 2
            merged = np.full((self.bands, *self._tile_shape(level + 1, *parent)), np.nan, dtype=np.float32)
            for (qy, qx), quarter in waiting.items():
                merged[:, qy * half:qy * half + quarter.shape[1], qx * half:qx * half + quarter.shape[2]] = quarter
            self._emit(level + 1, *parent, merged)

    def flush(self):
        """Finishes every open or untouched tile; returns how many lacked windows."""
        missing = int((~self.done & (self.arrived < self.needed)).sum())
        for ty, tx in zip(*np.nonzero(~self.done)):
            self.close(int(ty), int(tx))
        return missing

    def write(self):
        """Assembles the COG from the spool (every tile finished) and removes the spool.

        The file is assembled under a hidden name next to the output, then renamed over it;
        `check_target` runs before and again right before that rename (what is at the path
        may have changed meanwhile). On any failure the staged file goes too."""
        staged = None
        try:
            check_target(self.path)
            fd, staged = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(self.path)),
                                          prefix=f".{os.path.basename(self.path)}.", suffix=".tmp")
            os.close(fd)
            _cog.write_cog(staged, self.sizes, self.bands, self.tile_size, self.blocks, self.spool,
                           self.geotransform, self.epsg)
            check_target(self.path)
            os.replace(staged, self.path)
        except BaseException:
            if staged is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staged)
            raise
        finally:
            self.drop()
        return self.path


def _remove(spool, path):
    spool.close()
    os.unlink(path)


class Stitcher:
    """Writes predictions over the windows of a grid stream as float32 COGs on the scenes'
    grids, with their CRS, geotransform and overviews.

    `info`: the dataset's `DatasetInfo` (`Client.describe`). Stream the dataset with
    `sampler="grid"` and the same `patch_size`, `stride` and `level`, without `augment`;
    every window has to reach this one Stitcher (one rank, or gather them).

    `layer`: the output grid. Pixel-space datasets: "image", the scene at `level`. Map-space
    (STAC) datasets: a layer name; its grid is the reference grid scaled by
    f = layers[0].resolution / layer.resolution (patch_size·f and stride·f must be whole
    pixels), and predictions are patch_size·f pixels square.

    `out`: the output path; "{scene}" in it is replaced by the scene's name (see
    `scene_stem`), which is required as soon as a second scene arrives; two scenes with one
    path are refused (ValueError) when the second one's first window arrives. An output path
    may be missing or a regular file (replaced when the scene is written); anything else
    there, a symbolic link included, is refused with an `InvalidRequest` and left alone: at
    construction (`out` without placeholder), as a scene opens, and right before its file
    is renamed into place (`check_target`). `blend`: "mean", "cosine" or "center" (see
    `BLENDS`). `tile_size`: a multiple of 16.

    `add(batch, preds)` takes a `Batch` (or its windows array [B, 7]) and predictions
    [B, K, h, w] (any real dtype; numpy or anything `np.asarray` takes). A scene's file is
    written as soon as all its windows have arrived; `finish()` writes the others with what
    they have (warning about tiles that lacked windows: `incomplete_tiles`) and returns the
    paths written, by scene. Used as a context manager it finishes on a clean exit and
    drops its temporary files on an exception.

    Non-finite predictions (NaN, +inf, -inf) are left out of the blend, band by band and pixel
    by pixel: a pixel keeps what the finite values over it give, NaN where there were none.

    Files: K float32 bands, `tile_size` tiles, DEFLATE, nodata NaN (pixels no finite
    prediction covered), overviews down to one tile (2 x 2 means of the non-NaN pixels);
    BigTIFF only beyond 4 GiB (see `cogfeed._cog`). Spools and staged files are hidden
    temporary files next to each output.
    """

    def __init__(self, info: Any, *, out: Union[str, "os.PathLike[str]"], layer: str = "image", blend: str = "cosine",
                 patch_size: int = 256, stride: Optional[int] = None, level: int = 0, tile_size: int = 256) -> None:
        if not hasattr(info, "scenes"):
            raise TypeError(f"info must be a DatasetInfo (Client.describe(name)), got {type(info).__name__}")
        if blend not in BLENDS:
            raise ValueError(f"unknown blend {blend!r} (one of {', '.join(BLENDS)})")
        stride = patch_size if stride is None else stride
        for name, value in (("patch_size", patch_size), ("stride", stride), ("tile_size", tile_size)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if tile_size % 16:
            raise ValueError(f"tile_size must be a multiple of 16, got {tile_size}")
        if not isinstance(level, (int, np.integer)) or level < 0:
            raise ValueError(f"level must be a non-negative integer, got {level!r}")
        self.info, self.out = info, os.fspath(out)
        if PLACEHOLDER not in self.out:
            check_target(self.out)
        self.layer, self.blend = layer, blend
        self.patch_size, self.stride, self.level = int(patch_size), int(stride), int(level)
        self.tile_size = int(tile_size)
        self.map_space = len(info.layers) > 0
        if self.map_space:
            names = [l.name for l in info.layers]
            if layer not in names:
                raise ValueError(f"unknown layer {layer!r} of dataset {info.name!r} (layers: {', '.join(names)})")
            if level:
                raise ValueError(f"map-space dataset {info.name!r} has one level; got level={level}")
            self._factor = info.layers[0].resolution / info.layers[names.index(layer)].resolution
            scaled = {}
            for name, value in (("patch_size", patch_size), ("stride", stride)):
                scaled[name] = value * self._factor
                if abs(scaled[name] - round(scaled[name])) > 1e-9:
                    raise ValueError(f"{name} {value} is {scaled[name]:g} pixels of layer {layer!r} "
                                     f"(resolution ratio {self._factor:g}): not a whole number")
            self._pred_size, self._out_stride = round(scaled["patch_size"]), round(scaled["stride"])
        else:
            if layer != "image":
                raise ValueError(f"unknown layer {layer!r}: dataset {info.name!r} is not map-space, "
                                 "its only layer is 'image'")
            self._pred_size, self._out_stride = self.patch_size, self.stride
        h = w = self._pred_size
        if blend == "cosine":
            self._kernel = np.outer(np.sin(np.pi * (np.arange(h) + 0.5) / h) ** 2,
                                    np.sin(np.pi * (np.arange(w) + 0.5) / w) ** 2)
        elif blend == "center":
            i, j = np.arange(h)[:, None], np.arange(w)[None, :]
            self._kernel = np.maximum(np.abs(2 * i - h + 1), np.abs(2 * j - w + 1))
        else:
            self._kernel = np.ones((h, w))
        #: Bands K of the predictions (set by the first `add`).
        self.bands: Optional[int] = None
        #: Level-0 tiles written by `finish()` while windows touching them had not arrived.
        self.incomplete_tiles = 0
        #: Most level-0 tile accumulators open at once.
        self.peak_tiles_in_memory = 0
        self._scenes: Dict[int, _Scene] = {}  # scene index -> _Scene being filled
        self._written: Dict[int, str] = {}  # scene index -> path
        self._finished = False

    def path(self, scene: int) -> str:
        """The output path of scene `scene` (its index)."""
        return self.out.replace(PLACEHOLDER, scene_stem(self.info.scenes[scene].name))

    def add(self, batch: Any, preds: Any) -> None:
        """Adds predictions [B, K, h, w] for the windows of `batch` (row b for windows[b])."""
        if self._finished:
            raise ValueError("add() after finish()")
        windows = np.asarray(getattr(batch, "windows", batch))
        if windows.ndim != 2 or windows.shape[1] != 7:
            raise TypeError(f"expected a Batch or a windows array [B, 7], got shape {windows.shape}")
        preds = np.asarray(preds)
        if preds.dtype.kind not in "biuf":
            raise TypeError(f"predictions must hold real numbers, got dtype {preds.dtype}")
        size = self._pred_size
        if preds.ndim != 4 or preds.shape[0] != len(windows) or preds.shape[2:] != (size, size) \
                or preds.shape[1] == 0:
            raise ValueError(f"predictions of shape {tuple(preds.shape)} do not fit {len(windows)} windows of layer "
                             f"{self.layer!r}: expected [{len(windows)}, K, {size}, {size}]")
        if self.bands is None:
            self.bands = preds.shape[1]
        elif preds.shape[1] != self.bands:
            raise ValueError(f"predictions with {preds.shape[1]} bands after {self.bands}")
        for window, pred in zip(windows.tolist(), preds):
            self._add_one(window, pred)

    def _add_one(self, window, pred):
        scene, col, row, width, height, level, _ = window
        if not 0 <= scene < len(self.info.scenes):
            raise ValueError(f"window {window}: no scene {scene} in dataset {self.info.name!r}")
        if (width, height, level) != (self.patch_size, self.patch_size, self.level) \
                or col % self.stride or row % self.stride:
            raise ValueError(f"window {window} is not on the grid of patch_size {self.patch_size}, "
                             f"stride {self.stride} at level {self.level}")
        if scene in self._written:
            return  # a repeat of a window of a scene already written
        state = self._scenes.get(scene) or self._open_scene(scene)
        ix, iy = col // self.stride, row // self.stride
        if ix >= state.nx or iy >= state.ny:
            raise ValueError(f"window {window} starts past the grid of scene {scene}")
        state.add(ix, iy, pred, self._on_open)
        if state.complete:
            del self._scenes[scene]  # written, or (a refused path) dropped with its spool
            self._written[scene] = state.write()

    def _on_open(self):
        now = sum(len(s.open) for s in self._scenes.values())
        self.peak_tiles_in_memory = max(self.peak_tiles_in_memory, now)

    def _open_scene(self, scene):
        seen = next(iter([*self._scenes, *self._written]), None)
        if PLACEHOLDER not in self.out and seen is not None:
            raise ValueError(f"samples of scenes {seen} and {scene} arrive but out={self.out!r} has no "
                             f"{PLACEHOLDER!r} placeholder for one file per scene")
        path = self.path(scene)
        clash = [s for s in [*self._scenes, *self._written] if self.path(s) == path]
        if clash:
            raise ValueError(f"scenes {clash[0]} and {scene} would both be written to {path!r}")
        if not self.map_space and self.level >= len(self.info.scenes[scene].levels):
            raise ValueError(f"scene {scene} has no level {self.level}")
        check_target(path)
        state = self._scenes[scene] = _Scene(self, scene, path)
        return state

    def finish(self) -> List[str]:
        """Writes the scenes still open (tiles lacking windows with what they have) and
        returns the paths written, by scene index. Calling it again returns them again.

        A scene whose file fails (a refused output path) does not stop the others: they are
        written, then the first failure is raised; no spool is left either way."""
        if not self._finished:
            self._finished = True
            total, failures = 0, []
            try:
                for scene in sorted(self._scenes):
                    state = self._scenes.pop(scene)
                    try:
                        self.incomplete_tiles += state.flush()
                        total += state.done.size
                        self._written[scene] = state.write()
                    except Exception as e:
                        failures.append(e)
                    finally:
                        state.drop()
            finally:
                self._discard()  # what an interrupt left open
            if self.incomplete_tiles:
                warnings.warn(f"{self.incomplete_tiles} of {total} tiles of the scenes still open at finish() lacked "
                              "windows (skipped samples, max_batches, another rank's share, an interrupted "
                              "stream?): written with what arrived, NaN where nothing did", stacklevel=2)
            if failures:
                raise failures[0]
        return [self._written[s] for s in sorted(self._written)]

    def _discard(self):
        """Drops the scenes being filled and their spools (nothing more is written)."""
        self._finished = True
        for state in self._scenes.values():
            state.drop()
        self._scenes.clear()

    def __enter__(self) -> "Stitcher":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is None:
            self.finish()
        else:
            self._discard()
