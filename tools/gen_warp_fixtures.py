#!/usr/bin/python3
"""Writes the committed map-space warp fixtures: server/tests/fixtures/warp/.

A small, self-contained copy of the shared warp corpus (README "warp corpus"): a few COGs written by
GDAL's COG driver, a STAC ItemCollection describing them, and cases whose expected output GDAL 3.6 made
with the same gdal.Warp call as shared/conformance/gdal_warp_reader.py. server/tests/warp_gdal.rs
replays every case through `cogfeed_server::assemble::command::warp`; no GDAL is needed at test time.

Run with Debian's interpreter (it has the GDAL 3.6 bindings and numpy):

    /usr/bin/python3 tools/gen_warp_fixtures.py [--out server/tests/fixtures/warp]

Deterministic (fixed seeds, no timestamps): a rerun writes byte-identical files; the sha256 of every
file is printed at the end.

The archive (about 0.5 MB with the oracles):
  S2A_32TQS_20240603  EPSG:32632 (proj:epsg)  2.4 km tile east of 12°E's zone edge, 1.00 gain
  S2A_33TUM_20240603  EPSG:32633 (proj:code)  2.4 km tile in the next zone, overlapping A by ~1.2 km,
                                              its grid rotated ~4.4° against A's, 0.96 gain
  S2B_32TQS_20240608  EPSG:32632              A's tile on another date: 1.05 gain, clouds, a bigger wedge
  LC_12E_2024         EPSG:4326 (proj:code)   uint8 classes 1-6 at 0.0001°, 255 outside a rounded rectangle
Assets of the Sentinel-2-like items (uint16, nodata 0, DN = 1000 + 10000·reflectance):
  B04  10 m 240×240  DEFLATE+PREDICTOR=2, BLOCKSIZE=256, OVERVIEW_COUNT=2 (factors 2, 4; CUBIC)
  B08  10 m 240×240  ZSTD+PREDICTOR=2, BLOCKSIZE=128 (COG default levels: factor 2; CUBIC)
  B05  20 m 120×120  LZW, BLOCKSIZE=128 (no overview)            (not in the second-date item)
  SCL  20 m 120×120  uint8 classes, nodata 0, DEFLATE, BLOCKSIZE=128, OVERVIEW_COUNT=1 NEAREST
                                                                  (not in the second-date item)
Each tile-date has a nodata wedge (all bands 0) along the edge facing its neighbour.
Labels: 300×200, DEFLATE, BLOCKSIZE=128 (factors 2, 4; MODE overviews).

cases.json follows the shared corpus (id, kind, ids, assets, crs, bounds, resolution, resampling, nodata,
dtype, shape, oracle, tolerance, gdal.overview_used, mix); expect-error cases carry `expect: "error"` and
`message_contains`: strings the error message must name. For every item of every case the generator checks
that GDAL's `-ovr AUTO` pick equals the rule cogfeed implements (largest overview factor <= t, t = source
pixels per output pixel x edge at the footprint centre), and that nearest mosaics are the first-valid
composition of single-item warps.
"""
import argparse
import hashlib
import json
import os
import shutil
import tempfile

import numpy as np
from osgeo import gdal, osr

gdal.UseExceptions()
osr.UseExceptions()
gdal.SetConfigOption('GDAL_DISABLE_READDIR_ON_OPEN', 'EMPTY_DIR')
gdal.SetConfigOption('GDAL_NUM_THREADS', '1')
gdal.SetConfigOption('GDAL_TIFF_INTERNAL_MASK', 'NO')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 20240603
RESAMPLING = {'nearest': 'near', 'bilinear': 'bilinear', 'cubic': 'cubic', 'average': 'average', 'mode': 'mode'}
DTYPES = {'uint8': ('Byte', np.uint8), 'uint16': ('UInt16', np.uint16)}


# ---------------------------------------------------------------- geometry helpers
def srs(epsg):
    s = osr.SpatialReference()
    s.ImportFromEPSG(epsg)
    s.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    return s


def transform(src, dst, xs, ys):
    """Points from EPSG:src to EPSG:dst (x = easting / longitude first)."""
    if src == dst:
        return np.asarray(xs, float), np.asarray(ys, float)
    ct = osr.CoordinateTransformation(srs(src), srs(dst))
    pts = np.array(ct.TransformPoints(np.column_stack([np.ravel(xs), np.ravel(ys)]).tolist()))
    return pts[:, 0].reshape(np.shape(xs)), pts[:, 1].reshape(np.shape(ys))


def epsg_of(crs):
    return int(crs.split(':')[1])


# ---------------------------------------------------------------- content
def cell_hash(cx, cy, salt):
    h = (cx.astype(np.int64) * 73856093) ^ (cy.astype(np.int64) * 19349663) ^ (salt * 83492791)
    return (h % 1000003) % 1000 / 1000.0


def ground(lon, lat):
    """One landscape defined in lon/lat, so both zones see the same ground.
    Returns (reflectance-like field 0..1, class 1..6) per point."""
    u = (lon - 12.0) * 76600.0          # metres east of 12°E (approximately)
    v = (lat - 46.55) * 111200.0        # metres north of 46.55°N
    hills = 0.5 + 0.18 * np.sin(u / 310.0) * np.cos(v / 430.0) + 0.12 * np.sin((u + 0.6 * v) / 950.0)
    cx, cy = np.floor((u + 0.3 * v) / 260.0), np.floor((v - 0.2 * u) / 190.0)
    fields = cell_hash(cx, cy, 1)
    cls = np.where(fields < 0.35, 1, np.where(fields < 0.6, 3, np.where(fields < 0.8, 2, 4)))
    refl = hills + 0.25 * (fields - 0.5)
    river = np.abs(v - 260.0 * np.sin(u / 700.0) - 150.0) < 30.0
    lake = (u - 500.0) ** 2 / 200.0 ** 2 + (v + 700.0) ** 2 / 130.0 ** 2 < 1.0
    water = river | lake
    rock = hills > 0.76
    cls = np.where(rock, 6, cls)
    cls = np.where(water, 5, cls)
    refl = np.where(water, 0.04 + 0.01 * np.sin(u / 50.0), refl)
    refl = np.where(rock, refl + 0.15, refl)
    return np.clip(refl, 0.0, 0.6), cls


BAND_FACTOR = {'B04': 0.55, 'B05': 0.8, 'B08': 1.35}


class Tile:
    def __init__(self, item_id, epsg, x0, y0, gain, wedge, clouds, date, code_style):
        self.id, self.epsg, self.x0, self.y0 = item_id, epsg, x0, y0
        self.gain, self.wedge, self.clouds, self.date, self.code_style = gain, wedge, clouds, date, code_style

    def centres(self, res, n):
        col, row = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5)
        return self.x0 + col * res, self.y0 - row * res

    def in_wedge(self, x, y):
        c, r = (x - self.x0) / 10.0, (self.y0 - y) / 10.0   # 10 m pixel coordinates
        return self.wedge(c, r)

    def band(self, name, res, n, rng):
        x, y = self.centres(res, n)
        lon, lat = transform(self.epsg, 4326, x, y)
        refl, cls = ground(lon, lat)
        cloud = np.zeros_like(refl, dtype=bool)
        for (cx, cy, rad) in self.clouds:
            cloud |= (x - cx) ** 2 + (y - cy) ** 2 < rad ** 2
        wedge = self.in_wedge(x, y)
        if name == 'SCL':
            # cropland, forest, grassland, built-up, water, rock -> vegetation, unclassified,
            # not vegetated, dark area, water, snow; clouds -> cloud high probability
            scl = np.choose(cls - 1, [4, 7, 5, 2, 6, 11]).astype(np.uint8)
            scl = np.where(cloud, 9, scl)
            return np.where(wedge, 0, scl).astype(np.uint8)
        dn = 1000.0 + 10000.0 * refl * BAND_FACTOR[name] * self.gain
        dn = np.where(cloud, 6500.0 + 400.0 * np.sin(x / 90.0), dn)
        dn = dn + rng.normal(0.0, 0.8, size=dn.shape)
        dn = np.clip(np.round(dn), 1, 65535).astype(np.uint16)
        return np.where(wedge, 0, dn).astype(np.uint16)


# ---------------------------------------------------------------- writing COGs
def write_cog(path, arr, gt, epsg, nodata, gdal_type, options):
    mem = gdal.GetDriverByName('MEM').Create('', arr.shape[1], arr.shape[0], 1, gdal_type)
    mem.SetGeoTransform(gt)
    mem.SetProjection(srs(epsg).ExportToWkt())
    b = mem.GetRasterBand(1)
    b.SetNoDataValue(nodata)
    b.WriteArray(arr)
    gdal.Translate(path, mem, format='COG', creationOptions=options)
    mem = None


def level_sizes(path):
    ds = gdal.Open(path)
    b = ds.GetRasterBand(1)
    sizes = [(ds.RasterXSize, ds.RasterYSize)]
    for k in range(b.GetOverviewCount()):
        o = b.GetOverview(k)
        sizes.append((o.XSize, o.YSize))
    return sizes


def bbox_4326(epsg, gt, w, h):
    cols = np.array([0, w / 2, w, w, w, w / 2, 0, 0])
    rows = np.array([0, 0, 0, h / 2, h, h, h, h / 2])
    x = gt[0] + cols * gt[1] + rows * gt[2]
    y = gt[3] + cols * gt[4] + rows * gt[5]
    lon, lat = transform(epsg, 4326, x, y)
    return [round(float(lon.min()), 7), round(float(lat.min()), 7),
            round(float(lon.max()), 7), round(float(lat.max()), 7)]


def geometry(bb):
    return {'type': 'Polygon', 'coordinates': [[[bb[0], bb[1]], [bb[2], bb[1]], [bb[2], bb[3]],
                                                [bb[0], bb[3]], [bb[0], bb[1]]]]}


def build_archive(out):
    rng = np.random.default_rng(SEED)
    tiff = os.path.join(out, 'tiff')
    os.makedirs(tiff)
    # Origins are multiples of 60 m, so the 10 and 20 m grids of a zone nest.
    a = Tile('S2A_32TQS_20240603', 32632, 728160.0, 5160720.0, 1.00,
             lambda c, r: c > 240 - 22 - 0.15 * r, [], '2024-06-03T10:18:21Z', 'epsg')
    b = Tile('S2A_33TUM_20240603', 32633, 269460.0, 5160960.0, 0.96,
             lambda c, r: c < 14 + 0.1 * (240 - r), [], '2024-06-03T10:18:24Z', 'code')
    c = Tile('S2B_32TQS_20240608', 32632, 728160.0, 5160720.0, 1.05,
             lambda c, r: (c > 240 - 70 - 0.2 * (240 - r)) | (r > 225), [(728900.0, 5159900.0, 260.0),
                                                                         (729300.0, 5158900.0, 180.0)],
             '2024-06-08T10:20:31Z', 'epsg')
    specs = {   # asset: (res, size, dtype, nodata, creation options, title)
        'B04': (10, 240, 'uint16', ['COMPRESS=DEFLATE', 'PREDICTOR=2', 'BLOCKSIZE=256', 'OVERVIEW_COUNT=2',
                                    'RESAMPLING=CUBIC'], 'Red (B04) - 10m'),
        'B08': (10, 240, 'uint16', ['COMPRESS=ZSTD', 'PREDICTOR=2', 'BLOCKSIZE=128', 'RESAMPLING=CUBIC'],
                'NIR 1 (B08) - 10m'),
        'B05': (20, 120, 'uint16', ['COMPRESS=LZW', 'BLOCKSIZE=128'], 'Red Edge 1 (B05) - 20m'),
        'SCL': (20, 120, 'uint8', ['COMPRESS=DEFLATE', 'BLOCKSIZE=128', 'OVERVIEW_COUNT=1',
                                   'RESAMPLING=NEAREST'], 'Scene classification map (SCL)'),
    }
    features = []
    for tile, assets in ((a, ['B04', 'B08', 'B05', 'SCL']), (b, ['B04', 'B08', 'B05', 'SCL']),
                         (c, ['B04', 'B08'])):
        props = {'datetime': tile.date, 'platform': 'sentinel-2' + tile.id[2].lower(),
                 'constellation': 'sentinel-2', 'mgrs:utm_zone': tile.epsg - 32600}
        if tile.code_style == 'epsg':
            props['proj:epsg'] = tile.epsg
        else:
            props['proj:code'] = 'EPSG:%d' % tile.epsg
        ad, bb = {}, None
        for key in assets:
            res, n, dt, opts, title = specs[key]
            arr = tile.band(key, res, n, rng)
            gt = (tile.x0, float(res), 0.0, tile.y0, 0.0, -float(res))
            name = '%s_%s.tif' % (tile.id.split('_', 1)[1], key)
            write_cog(os.path.join(tiff, name), arr, gt, tile.epsg, 0, gdal.GetDataTypeByName(DTYPES[dt][0]), opts)
            bb = bbox_4326(tile.epsg, gt, n, n)
            entry = {'href': 'tiff/' + name, 'type': 'image/tiff; application=geotiff; profile=cloud-optimized',
                     'roles': ['data'], 'title': title, 'gsd': res,
                     'proj:shape': [n, n], 'proj:transform': [float(res), 0.0, tile.x0, 0.0, -float(res), tile.y0],
                     'raster:bands': [{'data_type': dt, 'nodata': 0, 'spatial_resolution': res}]}
            if dt == 'uint16':
                entry['raster:bands'][0].update({'scale': 0.0001, 'offset': -0.1})
            if key == 'B08':    # the asset's field overrides the item's (same value here, other spelling)
                if tile.code_style == 'epsg':
                    entry['proj:code'] = 'EPSG:%d' % tile.epsg
                else:
                    entry['proj:epsg'] = tile.epsg
            ad[key] = entry
        features.append({'type': 'Feature', 'stac_version': '1.0.0',
                         'stac_extensions': ['https://stac-extensions.github.io/projection/v1.1.0/schema.json',
                                             'https://stac-extensions.github.io/raster/v1.1.0/schema.json'],
                         'id': tile.id, 'collection': 'sentinel-2-l2a', 'bbox': bb, 'geometry': geometry(bb),
                         'properties': props, 'assets': ad, 'links': []})
    # Labels: EPSG:4326, 0.0001°, classes 1-6, 255 outside a rounded rectangle.
    res, w, h, lon0, lat0 = 0.0001, 300, 200, 11.985, 46.56
    col, row = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    _, cls = ground(lon0 + col * res, lat0 - row * res)
    inset, rad = 14.0, 40.0
    dx = np.maximum(np.maximum(inset + rad - col, col - (w - inset - rad)), 0.0)
    dy = np.maximum(np.maximum(inset + rad - row, row - (h - inset - rad)), 0.0)
    inside = dx ** 2 + dy ** 2 < rad ** 2
    labels = np.where(inside, cls, 255).astype(np.uint8)
    gt = (lon0, res, 0.0, lat0, 0.0, -res)
    write_cog(os.path.join(tiff, 'LC_12E_2024_classes.tif'), labels, gt, 4326, 255, gdal.GDT_Byte,
              ['COMPRESS=DEFLATE', 'BLOCKSIZE=128', 'RESAMPLING=MODE'])
    bb = [lon0, round(lat0 - h * res, 7), round(lon0 + w * res, 7), lat0]
    features.append({
        'type': 'Feature', 'stac_version': '1.0.0',
        'stac_extensions': ['https://stac-extensions.github.io/projection/v2.0.0/schema.json',
                            'https://stac-extensions.github.io/raster/v1.1.0/schema.json',
                            'https://stac-extensions.github.io/classification/v1.1.0/schema.json'],
        'id': 'LC_12E_2024', 'collection': 'synthetic-landcover', 'bbox': bb, 'geometry': geometry(bb),
        'properties': {'datetime': None, 'start_datetime': '2024-01-01T00:00:00Z',
                       'end_datetime': '2024-12-31T23:59:59Z', 'proj:code': 'EPSG:4326'},
        'assets': {'classes': {
            'href': 'tiff/LC_12E_2024_classes.tif', 'type': 'image/tiff; application=geotiff; profile=cloud-optimized',
            'title': 'Land-cover classes', 'roles': ['data'],
            'raster:bands': [{'data_type': 'uint8', 'nodata': 255}],
            'classification:classes': [{'value': v, 'description': d} for v, d in enumerate(
                ['cropland', 'forest', 'grassland', 'built-up', 'water', 'bare rock'], 1)],
            'proj:code': 'EPSG:4326', 'proj:shape': [h, w],
            'proj:transform': [res, 0.0, lon0, 0.0, -res, lat0, 0.0, 0.0, 1.0]}},
        'links': []})
    doc = {'type': 'FeatureCollection', 'features': features}
    with open(os.path.join(out, 'items.json'), 'w') as f:
        json.dump(doc, f, indent=1)
        f.write('\n')
    return {f['id']: f for f in features}


# ---------------------------------------------------------------- cases
def num(v):
    v = float(v)
    return int(v) if v.is_integer() and abs(v) < 1e15 else v


def bounds_at(crs, res, lon, lat, w, h, dx=0.0, dy=0.0):
    """Footprint of w x h pixels of `res` around (lon, lat), snapped to multiples of res, shifted by dx, dy."""
    x, y = transform(4326, epsg_of(crs), [lon], [lat])
    x0 = np.floor(float(x[0]) / res) * res - (w // 2) * res + dx
    y1 = np.floor(float(y[0]) / res) * res + (h - h // 2) * res + dy
    nd = 10 if res < 1 else 6
    return [num(round(v, nd)) for v in (x0, y1 - h * res, x0 + w * res, y1)]


# (id, kind, ids, assets, crs, res, resampling, nodata, (lon, lat, w, h[, dx, dy]), note)
A, B, C, L = 'S2A_32TQS_20240603', 'S2A_33TUM_20240603', 'S2B_32TQS_20240608', 'LC_12E_2024'
CASES = [
    ('f-native-00', 'native', [A], ['B04', 'B08'], 'EPSG:32632', 10, 'nearest', 0, (12.0035, 46.5525, 48, 40),
     '10 m assets copied on their own grid, across the wedge border'),
    ('f-native-01', 'native', [B], ['SCL'], 'EPSG:32633', 20, 'nearest', 0, (12.004, 46.548, 32, 28),
     'SCL copied on its own 20 m grid'),
    ('f-native-02', 'native', [C], ['B04'], 'EPSG:32632', 10, 'nearest', 0, (11.992, 46.5445, 24, 56),
     'second date on its own grid: clouds, wedge'),
    ('f-upsample-00', 'upsample', [A], ['B05'], 'EPSG:32632', 10, 'bilinear', 0, (11.99, 46.551, 40, 40),
     '20 m band onto the nested 10 m grid'),
    ('f-upsample-01', 'upsample', [B], ['B05'], 'EPSG:32633', 10, 'cubic', 0, (12.0015, 46.552, 36, 44, 5, -5),
     '20 m band onto a 10 m grid shifted half a pixel; wedge border'),
    ('f-upsample-02', 'upsample', [A], ['SCL'], 'EPSG:32632', 10, 'nearest', 0, (11.988, 46.547, 32, 32),
     'SCL onto 10 m'),
    ('f-downsample-00', 'downsample', [A], ['B04'], 'EPSG:32632', 20, 'average', 0, (11.99, 46.553, 30, 30),
     '10 m onto 20 m: t = 2 reads the CUBIC overview'),
    ('f-downsample-01', 'downsample', [B], ['B04', 'B08'], 'EPSG:32633', 40, 'average', 0, (12.01, 46.551, 16, 16),
     '10 m onto 40 m: B04 reads its factor-4 level, B08 averages its factor-2 level'),
    ('f-downsample-02', 'downsample', [A], ['B08'], 'EPSG:32632', 30, 'nearest', 0, (11.99, 46.55, 20, 20),
     '10 m onto 30 m nearest from the factor-2 level'),
    ('f-downsample-03', 'downsample', [B], ['SCL'], 'EPSG:32633', 60, 'mode', 0, (12.007, 46.55, 16, 16),
     'SCL onto 60 m with mode (NEAREST-made overview)'),
    ('f-reproject-00', 'reproject', [A], ['B04'], 'EPSG:32633', 10, 'nearest', 0, (11.99, 46.55, 48, 48),
     'zone 32 tile into zone 33 at 10 m'),
    ('f-reproject-01', 'reproject', [B], ['B08'], 'EPSG:32632', 10, 'cubic', 0, (12.006, 46.553, 40, 40),
     'zone 33 tile into zone 32 at 10 m, cubic'),
    ('f-reproject-02', 'reproject', [A], ['B04', 'B08'], 'EPSG:32633', 30, 'average', 0, (11.991, 46.549, 24, 24),
     'zone 32 into zone 33 at 30 m: t ~ 3 reads the factor-2 level'),
    ('f-reproject-03', 'reproject', [B], ['B04'], 'EPSG:4326', 0.0001, 'bilinear', 0, (12.005, 46.552, 40, 30),
     'into EPSG:4326 at 0.0001°'),
    ('f-reproject-04', 'reproject', [A], ['B05'], 'EPSG:3035', 10, 'bilinear', 0, (11.99, 46.545, 32, 32),
     'into EPSG:3035 (LAEA Europe) at 10 m'),
    ('f-mosaic-00', 'mosaic', [A, B], ['B04'], 'EPSG:32633', 10, 'nearest', 0, (12.004, 46.552, 64, 48),
     'cross-zone: A first, its wedge filled by B'),
    ('f-mosaic-01', 'mosaic', [B, A], ['B08'], 'EPSG:32632', 10, 'bilinear', 0, (11.9985, 46.549, 56, 40),
     'cross-zone, B first, bilinear'),
    ('f-mosaic-02', 'mosaic', [C, A], ['B04', 'B08'], 'EPSG:32632', 10, 'nearest', 0, (11.9972, 46.5445, 48, 48),
     'same grid, two dates: the second date first, its wedge filled by the first'),
    ('f-edge-00', 'edge', [B], ['B04', 'B08'], 'EPSG:32633', 10, 'bilinear', 65535, (12.0225, 46.555, 40, 32),
     'half past the east edge of every item, filled with 65535'),
    ('f-edge-01', 'edge', [A, B], ['SCL'], 'EPSG:32632', 20, 'nearest', 255, (11.998, 46.5615, 40, 24),
     'north edge of both items, filled with 255'),
    ('f-labels-00', 'labels', [L], ['classes'], 'EPSG:32632', 20, 'mode', 255, (11.996, 46.55, 40, 40),
     'EPSG:4326 classes onto a 20 m UTM grid with mode (MODE overview, t ~ 2.6)'),
    ('f-labels-01', 'labels', [L], ['classes'], 'EPSG:32633', 10, 'nearest', 0, (12.003, 46.545, 48, 40),
     'EPSG:4326 classes onto 10 m in zone 33, fill 0'),
    ('f-labels-02', 'labels', [L], ['classes'], 'EPSG:32633', 10, 'mode', 255, (12.0115, 46.5565, 40, 36),
     'EPSG:4326 classes onto 10 m with mode, across the unlabelled border'),
    ('f-subpixel-00', 'subpixel', [A], ['B04'], 'EPSG:32632', 7.5, 'cubic', 0, (11.985, 46.546, 40, 40, 3.7, -1.3),
     'bounds on no source grid, 7.5 m'),
    ('f-subpixel-01', 'subpixel', [A, B], ['B05'], 'EPSG:32633', 12.5, 'average', 0,
     (12.0, 46.55, 36, 32, 6.25, 2.5), 'cross-zone mosaic of a 20 m band at 12.5 m, average'),
]
ERRORS = [
    ('f-error-asset', [A], ['B10'], 'EPSG:32632', 0, [A, 'B10'], 'an asset that no item has'),
    ('f-error-crs', [A], ['B04'], 'EPSG:999999', 0, ['EPSG:999999'], 'a CRS that is not a CRS'),
    ('f-error-id', [A, 'S2X_NOT_HERE'], ['B04'], 'EPSG:32632', 0, ['S2X_NOT_HERE'], 'an id that is not in the document'),
    ('f-error-nodata', [A], ['B04'], 'EPSG:32632', 70000, ['70000', 'uint16'], 'a nodata that does not fit uint16'),
    ('f-error-nodata-u8', [L], ['classes'], 'EPSG:32632', -1, ['-1', 'uint8'], 'a nodata that does not fit uint8'),
]


def warp(srcs, bounds, res, crs, resampling, src_nd, nodata, gdal_type, ovr='AUTO'):
    snd = ' '.join(repr(float(v)) for v in src_nd) if src_nd else 'None'
    opts = gdal.WarpOptions(format='MEM', outputBounds=bounds, xRes=res, yRes=res, dstSRS=crs,
                            resampleAlg=RESAMPLING[resampling], srcNodata=snd, dstNodata=nodata,
                            outputType=gdal.GetDataTypeByName(gdal_type), multithread=False,
                            errorThreshold=0, overviewLevel=ovr)
    arr = gdal.Warp('', list(reversed(srcs)), options=opts).ReadAsArray()
    return arr[None] if arr.ndim == 2 else arr


def rule_t(item_epsg, gt_src, crs, bounds, res):
    """Full-resolution source pixels per output pixel x edge at the footprint centre."""
    w = int((bounds[2] - bounds[0]) / res + 0.5)
    h = int((bounds[3] - bounds[1]) / res + 0.5)
    cx, cy = w / 2.0, h / 2.0
    xs = [bounds[0] + cx * res, bounds[0] + (cx + 1) * res]
    ys = [bounds[3] - cy * res] * 2
    sx, sy = transform(epsg_of(crs), item_epsg, xs, ys)
    inv = gdal.InvGeoTransform(gt_src)
    cols = [inv[0] + inv[1] * x + inv[2] * y for x, y in zip(sx, sy)]
    rows = [inv[3] + inv[4] * x + inv[5] * y for x, y in zip(sx, sy)]
    return float(np.hypot(cols[1] - cols[0], rows[1] - rows[0]))


def item_epsg(it, key):
    a = it['assets'][key]
    code = a.get('proj:code') or it['properties'].get('proj:code')
    return int(code.split(':')[1]) if code else a.get('proj:epsg', it['properties'].get('proj:epsg'))


def make_case(out, items, spec):
    cid, kind, ids, assets, crs, res, resampling, nodata, where, note = spec
    lon, lat, w, h = where[:4]
    dx, dy = (where[4], where[5]) if len(where) > 4 else (0.0, 0.0)
    bounds = bounds_at(crs, res, lon, lat, w, h, dx, dy)
    dtype = items[ids[0]]['assets'][assets[0]]['raster:bands'][0]['data_type']
    gdal_type, np_type = DTYPES[dtype]
    outs, used, mix = [], {}, None
    for key in assets:
        srcs = [os.path.join(out, items[i]['assets'][key]['href']) for i in ids]
        src_nd = [b['nodata'] for b in items[ids[0]]['assets'][key]['raster:bands']]
        arr = warp(srcs, bounds, res, crs, resampling, src_nd, nodata, gdal_type)
        used[key] = {}
        singles = []
        for i, src in zip(ids, srcs):
            ds = gdal.Open(src)
            gt = ds.GetGeoTransform()
            sizes = level_sizes(src)
            factors = [sizes[0][0] / s[0] for s in sizes[1:]]
            t = rule_t(item_epsg(items[i], key), gt, crs, bounds, res)
            for f in factors:
                assert not (abs(t - f) <= 0.015 * f and abs(t - f) > 1e-6), '%s %s %s: t=%.4f near %s' % (
                    cid, key, i, t, f)
            level = -1
            for k, f in enumerate(factors):
                if f <= t * (1 + 1e-9):
                    level = k
            auto = warp([src], bounds, res, crs, resampling, src_nd, nodata, gdal_type)
            singles.append(auto)
            matches = []
            for k in [-1] + list(range(len(factors))):
                alt = warp([src], bounds, res, crs, resampling, src_nd, nodata, gdal_type,
                           ovr='NONE' if k < 0 else str(k))
                if np.array_equal(alt, auto):
                    matches.append(k)
            assert level in matches, '%s %s %s: rule picks %d, GDAL AUTO matches %s (t=%.4f)' % (
                cid, key, i, level, matches, t)
            used[key][i] = {'level': 'full' if level < 0 else level,
                            'pixel_size': abs(gt[1]) * (1 if level < 0 else factors[level]),
                            't': round(t, 5), 'factors': factors}
        if len(ids) > 1:
            valid = [s != nodata for s in singles]
            comp = np.full_like(arr, nodata)
            filled = np.zeros(arr.shape, bool)
            for s, v in zip(singles, valid):
                take = v & ~filled
                comp[take] = s[take]
                filled |= v
            if resampling == 'nearest':
                assert np.array_equal(comp, arr), '%s: the oracle is not the first-valid composition' % cid
            if mix is None:
                n = valid[0].size
                v0, v1 = valid[0], np.logical_or.reduce(valid[1:])
                mix = {'first': round(float(v0.sum()) / n, 4), 'filled_by_later': round(float((~v0 & v1).sum()) / n, 4),
                       'valid_in_both': round(float((v0 & v1).sum()) / n, 4),
                       'valid_in_none': round(float((~v0 & ~v1).sum()) / n, 4)}
        outs.append(arr)
    arr = np.ascontiguousarray(np.concatenate(outs, 0).astype(np.dtype(np_type).newbyteorder('<'), copy=False))
    assert arr.shape[1:] == (h, w), (cid, arr.shape, w, h)
    valid = arr[arr != nodata]
    assert valid.size > 0.05 * arr.size, '%s: almost empty (%d valid)' % (cid, valid.size)
    if kind == 'edge':
        frac = valid.size / arr.size
        assert 0.08 < frac < 0.92, '%s: %.2f covered' % (cid, frac)
    oracle = 'oracle/%s.npy' % cid
    np.save(os.path.join(out, oracle), arr)
    if resampling in ('nearest', 'mode'):
        tol = {'mode': 'exact', 'min_frac_exact': 1.0 if kind == 'native' else 0.999}
    else:
        rng_ = float(valid.max()) - float(valid.min())
        tol = {'mode': 'approx', 'range': rng_, 'within': max(1.0, round(0.002 * rng_, 6)),
               'min_frac_within': 0.995, 'max_abs': round(0.05 * rng_, 6)}
    case = {'id': cid, 'kind': kind, 'ids': ids, 'assets': assets, 'crs': crs, 'bounds': bounds,
            'resolution': num(res), 'resampling': resampling, 'nodata': num(nodata), 'dtype': dtype,
            'shape': list(arr.shape), 'oracle': oracle, 'tolerance': tol, 'note': note,
            'gdal': {'call': 'gdal.Warp(MEM, sources=reversed(ids), outputBounds=bounds, xRes=yRes=resolution, '
                             'dstSRS=crs, resampleAlg=%s, srcNodata=<raster:bands nodata>, dstNodata=nodata, '
                             'outputType=%s, multithread=False, errorThreshold=0, overviewLevel=AUTO)'
                             % (RESAMPLING[resampling], gdal_type),
                     'overview_used': used}}
    if mix is not None:
        case['mix'] = mix
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default=os.path.join(ROOT, 'server', 'tests', 'fixtures', 'warp'))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    tmp = tempfile.mkdtemp(prefix='warp-fixtures-', dir=os.path.dirname(out))
    try:
        items = build_archive(tmp)
        os.makedirs(os.path.join(tmp, 'oracle'))
        cases = [make_case(tmp, items, s) for s in CASES]
        for cid, ids, assets, crs, nodata, needles, note in ERRORS:
            dtype = 'uint8' if assets == ['classes'] else 'uint16'   # the fields check_warp.py expects
            cases.append({'id': cid, 'kind': 'error', 'ids': ids, 'assets': assets, 'crs': crs,
                          'bounds': [728500, 5159000, 728820, 5159320], 'resolution': 10,
                          'resampling': 'nearest', 'nodata': nodata, 'dtype': dtype, 'expect': 'error',
                          'message_contains': needles, 'note': note})
        with open(os.path.join(tmp, 'cases.json'), 'w') as f:
            json.dump(cases, f, indent=1)
            f.write('\n')
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
        os.chmod(out, 0o755)   # mkdtemp made it 0700
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    total = 0
    for dirpath, _, files in sorted(os.walk(out)):
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            total += os.path.getsize(p)
            with open(p, 'rb') as f:
                print('%s  %7d  %s' % (hashlib.sha256(f.read()).hexdigest(), os.path.getsize(p),
                                       os.path.relpath(p, out)))
    for c in cases:
        if c['kind'] != 'error':
            print('%-16s %-10s %-8s %-11s %s' % (c['id'], c['kind'], c['resampling'], c['crs'],
                                                 'x'.join(str(s) for s in c['shape'])),
                  ' '.join('%s:%s' % (k, ','.join(str(u['level']) for u in v.values()))
                           for k, v in c['gdal']['overview_used'].items()), c.get('mix', ''))
    print('%d files, %.2f MB, %d cases' % (sum(len(f) for _, _, f in os.walk(out)), total / 1e6, len(cases)))


if __name__ == '__main__':
    main()
