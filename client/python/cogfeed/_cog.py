"""A minimal writer of tiled float32 Cloud-Optimized GeoTIFFs, with numpy and zlib only.

This module owns the output file format of `cogfeed.Stitcher`: the overview pyramid (sizes
and 2 x 2 decimation), the encoding of one tile, and the assembly of a COG from tiles that
were compressed ahead of time into a spool file.

The files are little-endian TIFF: K float32 bands (SampleFormat 3, BitsPerSample 32),
pixel-interleaved (PlanarConfiguration 1), MinIsBlack with K - 1 unspecified ExtraSamples,
square tiles (edge tiles padded to the full tile size with NaN), DEFLATE (Compression 8,
zlib level 1, Predictor 1) and GDAL_NODATA "nan". The layout is the COG one: the header,
then every IFD with its out-of-line values (full resolution first, then the overviews from
largest to smallest, NewSubfileType 1), then the tile data (smallest overview first, full
resolution last, each level's tiles in row-major order). Georeferencing lives on the
full-resolution IFD: ModelPixelScale + ModelTiepoint for a north-up geotransform, else
ModelTransformation, and a GeoKeyDirectory naming the EPSG code (PixelIsArea; codes 4000 to
4999 are taken as geographic CRSs, others as projected). A file that would not fit in 4 GiB
is written as BigTIFF (magic 43, 64-bit offsets); smaller ones are classic TIFF.
"""

import os
import struct
import uuid
import zlib

import numpy as np

# TIFF field types and their struct codes.
ASCII, SHORT, LONG, DOUBLE, LONG8 = 2, 3, 4, 12, 16
_TYPES = {ASCII: "s", SHORT: "H", LONG: "I", DOUBLE: "d", LONG8: "Q"}

#: zlib level of the tiles: on float32 predictions level 1 is about 5x faster than 6 and no
#: larger (measured on the demo scenes).
DEFLATE_LEVEL = 1
_CLASSIC_LIMIT = 0xFFFFFFFF


def overview_sizes(width, height, tile_size):
    """(width, height) of the full-resolution level and of each overview: each overview is
    ceil(previous / 2) on both axes, added while either side of the previous level exceeds
    `tile_size`."""
    sizes = [(width, height)]
    while max(sizes[-1]) > tile_size:
        w, h = sizes[-1]
        sizes.append(((w + 1) // 2, (h + 1) // 2))
    return sizes


def decimate(values):
    """The next overview of `values` [K, h, w]: [K, ceil(h/2), ceil(w/2)] float32, each pixel
    the mean (in float64) of the non-NaN pixels of its 2 x 2 block (edge blocks use the
    pixels that exist), NaN when there are none."""
    bands, h, w = values.shape
    padded = np.full((bands, h + h % 2, w + w % 2), np.nan)
    padded[:, :h, :w] = values
    blocks = padded.reshape(bands, padded.shape[1] // 2, 2, padded.shape[2] // 2, 2)
    valid = ~np.isnan(blocks)
    total = np.where(valid, blocks, 0.0).sum(axis=(2, 4))
    count = valid.sum(axis=(2, 4))
    return np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)


def encode_tile(values, tile_size):
    """One compressed tile of `values` [K, h, w] (h, w <= tile_size): float32 pixels,
    pixel-interleaved, padded with NaN to tile_size x tile_size, zlib-compressed."""
    bands, h, w = values.shape
    tile = np.full((tile_size, tile_size, bands), np.nan, dtype="<f4")
    tile[:h, :w] = np.moveaxis(values, 0, -1)
    return zlib.compress(tile.tobytes(), DEFLATE_LEVEL)


def parse_epsg(crs):
    """The EPSG code of a "EPSG:<code>" string, None for an empty one."""
    if not crs:
        return None
    authority, _, code = crs.partition(":")
    if authority.upper() != "EPSG" or not code.isdigit() or not 0 < int(code) <= 0xFFFF:
        raise ValueError(f"unsupported CRS {crs!r}: expected EPSG:<code> with a code below 65536")
    return int(code)


def _geo_entries(geotransform, epsg):
    """Georeferencing tags of a GDAL geotransform [x0, dx, rx, y0, ry, dy] and EPSG code."""
    x0, dx, rx, y0, ry, dy = (float(v) for v in geotransform)
    if rx == 0 and ry == 0:
        entries = [(33550, DOUBLE, [dx, -dy, 0.0]), (33922, DOUBLE, [0.0, 0.0, 0.0, x0, y0, 0.0])]
    else:
        matrix = [dx, rx, 0.0, x0, ry, dy, 0.0, y0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        entries = [(34264, DOUBLE, matrix)]
    if epsg is not None:
        geographic = 4000 <= epsg <= 4999
        # GTModelType (1 projected, 2 geographic), GTRasterType (1 PixelIsArea), the CRS key.
        keys = [(1024, 2 if geographic else 1), (1025, 1), (2048 if geographic else 3072, epsg)]
        directory = [1, 1, 0, len(keys)]
        for key, value in keys:
            directory += [key, 0, 1, value]
        entries.append((34735, SHORT, directory))
    return entries


def _image_entries(width, height, bands, tile_size, offsets, counts, overview, big):
    """The tags of one image (full resolution or overview) without georeferencing."""
    pointer = LONG8 if big else LONG
    entries = [
        (254, LONG, [1 if overview else 0]),  # NewSubfileType: reduced-resolution image
        (256, LONG, [width]),
        (257, LONG, [height]),
        (258, SHORT, [32] * bands),  # BitsPerSample
        (259, SHORT, [8]),  # Compression: DEFLATE
        (262, SHORT, [1]),  # PhotometricInterpretation: MinIsBlack
        (277, SHORT, [bands]),  # SamplesPerPixel
        (284, SHORT, [1]),  # PlanarConfiguration: pixel-interleaved
        (317, SHORT, [1]),  # Predictor: none
        (322, LONG, [tile_size]),  # TileWidth
        (323, LONG, [tile_size]),  # TileLength
        (324, pointer, offsets),  # TileOffsets
        (325, pointer, counts),  # TileByteCounts
        (339, SHORT, [3] * bands),  # SampleFormat: IEEE float
        (42113, ASCII, b"nan\0"),  # GDAL_NODATA
    ]
    if bands > 1:
        entries.append((338, SHORT, [0] * (bands - 1)))  # ExtraSamples: unspecified
    return entries


def _ifd(entries, start, next_ifd, big):
    """One IFD placed at file offset `start`: the entry count, the entries sorted by tag, the
    next IFD's offset, then the values that do not fit in an entry (each on an even offset)."""
    count_code, field = ("Q", 8) if big else ("H", 4)
    pointer_code = "Q" if big else "I"
    head = struct.calcsize("<" + count_code) + len(entries) * (4 + 2 * field) + field
    table, extra = [struct.pack("<" + count_code, len(entries))], bytearray()
    for tag, kind, values in sorted(entries, key=lambda e: e[0]):
        if kind == ASCII:
            data, count = bytes(values), len(values)
        else:
            data, count = struct.pack(f"<{len(values)}{_TYPES[kind]}", *values), len(values)
        if len(data) <= field:
            value = data.ljust(field, b"\0")
        else:
            value = struct.pack("<" + pointer_code, start + head + len(extra))
            extra += data + b"\0" * (len(data) % 2)
        table.append(struct.pack(f"<HH{pointer_code}", tag, kind, count) + value)
    table.append(struct.pack("<" + pointer_code, next_ifd))
    return b"".join(table) + bytes(extra)


def write_cog(path, sizes, bands, tile_size, blocks, spool, geotransform=None, epsg=None, bigtiff=None):
    """Writes the COG `path` (atomically: a temporary file next to it, then renamed).

    `sizes`: (width, height) of each level, full resolution first (see `overview_sizes`).
    `blocks[level]`: (offset, length) in the binary file `spool` of that level's compressed
    tiles (`encode_tile`), in row-major order. `geotransform` (GDAL order) and `epsg` are
    optional. `bigtiff`: None picks classic TIFF when the file fits in 4 GiB, else BigTIFF.
    """
    for (width, height), level in zip(sizes, blocks):
        tiles = -(-width // tile_size) * -(-height // tile_size)
        if len(level) != tiles:
            raise ValueError(f"{len(level)} tiles given for a {width}x{height} level of {tile_size}-pixel tiles")
    data_size = sum(length for level in blocks for _, length in level)

    def ifds(big, offsets, starts):
        """Each level's IFD, given its tile offsets and where the IFDs start (the next IFD of
        one is the start of the following one); their sizes do not depend on these values."""
        out = []
        for i, (width, height) in enumerate(sizes):
            counts = [length for _, length in blocks[i]]
            entries = _image_entries(width, height, bands, tile_size, offsets[i], counts, i > 0, big)
            if i == 0 and geotransform is not None:
                entries += _geo_entries(geotransform, epsg)
            out.append(_ifd(entries, starts[i], starts[i + 1] if i + 1 < len(sizes) else 0, big))
        return out

    def starts(big):
        """Where each IFD starts, and where the tile data starts."""
        pos, found = (16 if big else 8), []
        for ifd in ifds(big, [[0] * len(level) for level in blocks], [0] * len(sizes)):
            found.append(pos)
            pos += len(ifd)
        return found, pos

    big = bigtiff
    if big is None:
        big = starts(False)[1] + data_size > _CLASSIC_LIMIT
    ifd_starts, pos = starts(big)
    # Tile data: smallest overview first, full resolution last.
    offsets = [[] for _ in sizes]
    for i in reversed(range(len(sizes))):
        for _, length in blocks[i]:
            offsets[i].append(pos)
            pos += length
    if not big and pos > _CLASSIC_LIMIT:
        raise ValueError(f"a {pos}-byte file does not fit in a classic TIFF (bigtiff=False)")

    # A temporary name next to `path` (created as open() would: the umask applies).
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    f = open(tmp, "xb")
    try:
        with f:
            if big:
                f.write(struct.pack("<2sHHHQ", b"II", 43, 8, 0, ifd_starts[0]))
            else:
                f.write(struct.pack("<2sHI", b"II", 42, ifd_starts[0]))
            for ifd in ifds(big, offsets, ifd_starts):
                f.write(ifd)
            for i in reversed(range(len(sizes))):
                for offset, length in blocks[i]:
                    spool.seek(offset)
                    f.write(spool.read(length))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
