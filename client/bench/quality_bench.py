#!/usr/bin/env python3
"""Does a locality-ordered epoch hurt training? (issue 28, item 7: quality, measured).

    python3 client/bench/quality_bench.py [--data DIR] [--steps 1024] [--seeds 0,1,2]
        [--batch 32] [--samples-per-epoch 4096] [--dial-cache-mib N] [--json OUT]

Trains the same small CNN (per-pixel segmentation, 5 classes) for the same number of steps on
batches streamed by the release daemon through the Python `Loader`, under three orders of the
same epochs, and scores each run on one fixed validation set from a separate region:

- `random`: the sampler's own order;
- `local, default dial`: `order = "local"`, `open_blocks` as the daemon sizes it from its tile
  cache when a cache of `--dial-cache-mib` (default: a quarter of the decoded training archive,
  the working set of locality_bench.py's cold regime) serves the stream, `visits = 1`;
- `local, tight dial`: `order = "local"`, `open_blocks = 1`, `visits = 1`.

A seed drives the sampler (`Loader(seed=)`) and the model's initialisation; every
configuration runs every seed of `--seeds`.

The archive (written once into `--data`, default `~/.cache/cogfeed-bench/quality`): a label
world of 5 classes, blobs of ~0.5-2 km whose class shares drift over ~10 km (a block of it may
be 70 % one class and another block 40 % another), cut into 3 UTM tiles (EPSG:32632, 10 m,
2048²): two side by side for training and one below them, straddling both, for validation.
Per tile, 3 dates and one COG per band (B02, B03, B04, B08) and date, uint16: the class's
spectrum at that date (two classes tell apart only by their phenology over the dates), a
regional illumination, a per-class texture and Gaussian noise (σ = 2000 DN: a single pixel's
nearest class mean is right about half the time), written by rasterio and made a COG by
`gdal_translate -of COG -co BLOCKSIZE=512 -co COMPRESS=DEFLATE -co PREDICTOR=2` (512² tiles), and
the label raster (uint8, nodata 255) the same way; a STAC Item per tile and date (collection
`train` or `val`). The daemon serves two map-space datasets: `quality` (the training tiles,
random sampler, patch 32) and `quality-val` (the validation tile, grid sampler, stride 64: 1,024
patches), each with one time layer `s2 [3, 4, 32, 32]` (`time_rule = "even"`: every sample
holds the 3 dates) and a layer `label [1, 32, 32]`.

The model: 3×3 convolutions 12 → 16 → 16 (dilation 2) → 16 (dilation 4), each with batch norm
and ReLU, a 1×1 convolution to 5 logits per pixel; AdamW (lr 3e-3, weight decay 1e-4) with a
cosine decay to a tenth over the run; torch on the CPU. Validation: pixel accuracy and mIoU
(mean over classes of the IoU over the whole validation set) of the final model, and again
with its batch-norm statistics re-estimated over 16 batches of one fixed random-order stream
(weights untouched: how much of a gap is the running statistics of the last batches seen);
the accuracy at the end of each epoch goes to the JSON.

Diversity of what the training loop saw, per window of W consecutive batches (W = 4 and 16;
non-overlapping windows inside each epoch, averaged over windows, epochs and seeds):
- groups: the number of distinct source groups, the blocks of the reference grid (512² tiles)
  the samples' footprints start in (from their metadata's bounds: the daemon's own grouping);
- distance: ½ (W1(x) + W1(y)) in km, W1 the 1-D Wasserstein-1 distance between the window's
  footprint centres and those of its whole epoch, along x and along y.

Prints a table, writes every figure to `--json`. The batches are a pure function of the
request whatever the cache, so training streams from one daemon with a cache that holds the
whole archive; the default dial is read off a second daemon with the `--dial-cache-mib` cache
(the `open_blocks` whose first batches equal that daemon's default ones). Needs the release
`cogfeed` (`COGFEED_BIN_DIR` or target/release), torch, rasterio and gdal_translate. Not part
of CI. Writing the archive takes about a minute (344 MB); the defaults then take about 5
minutes on an idle 2-core dev VM, 28 with a cargo build sharing it. Results:
docs/src/benchmarks/quality.md.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "client" / "python"))
import services as svc  # noqa: E402

import cogfeed  # noqa: E402

BANDS = ("B02", "B03", "B04", "B08")
DATES = ("2024-06-01", "2024-06-11", "2024-06-21")
EPSG, RES, X0, Y0 = 32632, 10.0, 600000.0, 5200000.0
PIXELS, TILE = 2048, 512  # tile side, COG tile side (a source block, a locality group)
PATCH, VAL_STRIDE = 32, 64
WINDOWS = (4, 16)  # batches per diversity window
#: tiles: name -> (collection, column and row of the tile's top-left pixel in the label world)
TILES = {"w": ("train", 0, 0), "e": ("train", PIXELS, 0), "v": ("val", PIXELS // 2, PIXELS)}
WORLD = (2 * PIXELS, 2 * PIXELS)  # rows, cols of the label world the tiles are cut from

CLASSES = ("water", "forest", "crops", "built", "bare")
#: class spectra [class, date, band] in DN: forest and crops differ mostly over the dates
#: (crops green up), built and bare mostly in red and texture.
SPECTRA = np.array([
    [[500, 600, 450, 350]] * 3,
    [[450, 700, 500, 2500], [450, 700, 480, 2700], [460, 720, 500, 2600]],
    [[700, 900, 900, 1900], [600, 950, 650, 2900], [550, 900, 500, 3400]],
    [[1200, 1300, 1400, 1900]] * 3,
    [[1100, 1300, 1600, 2100], [1150, 1350, 1650, 2150], [1200, 1400, 1700, 2200]],
], dtype=np.float32)
TEXTURE = np.array([50, 150, 200, 500, 150], np.float32)  # amplitude of a 1.5 px texture
CLASS_BIAS = np.array([0.0, 0.3, 0.2, -0.3, -0.5], np.float32)  # overall class shares
NOISE, OFFSET = 2000.0, 5000.0  # Gaussian noise σ, and an offset that keeps values above 0
NORM_MEAN, NORM_STD = OFFSET + 1200.0, 2200.0  # input scaling of the model (fixed)


# ----------------------------------------------------------------------------- the archive

def smooth_field(shape, sigma, rng):
    """A unit-variance Gaussian random field: white noise low-passed by a Gaussian of `sigma`
    pixels (through the FFT, so periodic)."""
    noise = rng.standard_normal(shape).astype(np.float32)
    fy = np.fft.fftfreq(shape[0])[:, None]
    fx = np.fft.rfftfreq(shape[1])[None, :]
    kernel = np.exp(-2.0 * (np.pi * sigma) ** 2 * (fx ** 2 + fy ** 2))
    f = np.fft.irfft2(np.fft.rfft2(noise) * kernel, s=shape)
    return ((f - f.mean()) / f.std()).astype(np.float32)


def label_world(rng):
    """Classes over the whole world: per class, blobs (σ 20 px) plus a regional preference
    (σ 300 px, which sets each region's class shares) plus an overall bias; the argmax wins."""
    score = np.stack([smooth_field(WORLD, 20, rng) + 1.3 * smooth_field(WORLD, 300, rng) + CLASS_BIAS[c]
                      for c in range(len(CLASSES))])
    return score.argmax(0).astype(np.uint8)


def band_values(labels, illumination, date, band, rng):
    """One band of one date of a tile, uint16 (0 is nodata, so values are kept >= 1)."""
    texture = smooth_field(labels.shape, 1.5, rng)
    x = (SPECTRA[labels, date, band] * illumination + TEXTURE[labels] * texture + OFFSET
         + NOISE * rng.standard_normal(labels.shape, dtype=np.float32))
    return np.clip(np.rint(x), 1, 65535).astype(np.uint16)


def write_cog(path, array, transform, nodata):
    """`array` as a COG of 512² DEFLATE + predictor tiles: rasterio writes it, GDAL makes the COG."""
    import rasterio

    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        plain = os.path.join(tmp, "plain.tif")
        with rasterio.open(plain, "w", driver="GTiff", width=array.shape[1], height=array.shape[0], count=1,
                           dtype=array.dtype.name, crs=f"EPSG:{EPSG}", transform=transform, nodata=nodata) as dst:
            dst.write(array, 1)
        subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", f"BLOCKSIZE={TILE}", "-co", "COMPRESS=DEFLATE",
                        "-co", "PREDICTOR=2", plain, str(path)], check=True)


def asset(href, dtype, nodata, x0, y0):
    """A STAC asset of one COG on a tile's grid."""
    return {
        "href": href, "type": "image/tiff; application=geotiff; profile=cloud-optimized", "roles": ["data"],
        "proj:epsg": EPSG, "proj:shape": [PIXELS, PIXELS], "proj:transform": [RES, 0.0, x0, 0.0, -RES, y0],
        "raster:bands": [{"data_type": dtype, "nodata": nodata, "spatial_resolution": RES}],
    }


def item(tile, collection, date, assets, x0, y0, to_lonlat):
    """The STAC Item of one tile and date."""
    xs = [x0, x0 + PIXELS * RES, x0, x0 + PIXELS * RES]
    ys = [y0, y0, y0 - PIXELS * RES, y0 - PIXELS * RES]
    lon, lat = to_lonlat.transform(xs, ys)
    bbox = [min(lon), min(lat), max(lon), max(lat)]
    ring = [[bbox[0], bbox[1]], [bbox[2], bbox[1]], [bbox[2], bbox[3]], [bbox[0], bbox[3]], [bbox[0], bbox[1]]]
    return {
        "type": "Feature", "stac_version": "1.0.0", "id": f"{tile}_d{date}", "collection": collection,
        "bbox": bbox, "geometry": {"type": "Polygon", "coordinates": [ring]},
        "properties": {"datetime": f"{DATES[date]}T10:00:00Z", "proj:epsg": EPSG}, "assets": assets,
    }


def write_archive(data: Path) -> Path:
    """The COGs, labels and STAC Items (kept when items.json is there)."""
    import pyproj
    from rasterio.transform import from_origin

    items_path = data / "items.json"
    if items_path.exists():
        return items_path
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    world = label_world(rng)
    illumination = 1.0 + 0.15 * smooth_field(WORLD, 400, rng)
    to_lonlat = pyproj.Transformer.from_crs(EPSG, 4326, always_xy=True)
    features = []
    for tile, (collection, col, row) in TILES.items():
        x0, y0 = X0 + col * RES, Y0 - row * RES
        transform = from_origin(x0, y0, RES, RES)
        labels = world[row:row + PIXELS, col:col + PIXELS]
        light = illumination[row:row + PIXELS, col:col + PIXELS]
        write_cog(data / f"{tile}_classes.tif", labels, transform, 255)
        for d in range(len(DATES)):
            assets = {"classes": asset(f"{tile}_classes.tif", "uint8", 255, x0, y0)}
            for b, band in enumerate(BANDS):
                name = f"{tile}_d{d}_{band}.tif"
                write_cog(data / name, band_values(labels, light, d, b, rng), transform, 0)
                assets[band] = asset(name, "uint16", 0, x0, y0)
            features.append(item(tile, collection, d, assets, x0, y0, to_lonlat))
        print(f"  wrote tile {tile} ({collection}): class shares "
              f"{np.round(np.bincount(labels.ravel(), minlength=len(CLASSES)) / labels.size, 2).tolist()}",
              flush=True)
    tmp = items_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"type": "FeatureCollection", "features": features}, indent=1))
    tmp.rename(items_path)
    return items_path


DATASET = """
[[datasets]]
name = "{name}"
stac = "{items}"
crs = "EPSG:{epsg}"
filter = {{ collections = ["{collection}"] }}

[[datasets.layers]]
name = "s2"
assets = {assets}
resolution = {res}
resampling = "bilinear"
time_steps = {dates}
time_rule = "even"
time_range = ["{first}", "{last}"]

[[datasets.layers]]
name = "label"
assets = ["classes"]
resolution = {res}
resampling = "nearest"
nodata = 255
"""


def datasets_toml(items):
    """The two datasets, `quality` (training tiles) and `quality-val`, as daemon TOML."""
    return "".join(DATASET.format(name=name, items=items, epsg=EPSG, collection=collection, res=RES,
                                  assets=json.dumps(list(BANDS)), dates=len(DATES), first=DATES[0], last=DATES[-1])
                   for name, collection in (("quality", "train"), ("quality-val", "val")))


def block_shares(data):
    """Class shares [block, class] of the training tiles' source blocks (512² label tiles)."""
    import rasterio

    shares = []
    for tile, (collection, _, _) in TILES.items():
        if collection != "train":
            continue
        with rasterio.open(data / f"{tile}_classes.tif") as src:
            labels = src.read(1)
        for r in range(0, PIXELS, TILE):
            for c in range(0, PIXELS, TILE):
                counts = np.bincount(labels[r:r + TILE, c:c + TILE].ravel(), minlength=len(CLASSES))
                shares.append(counts / counts.sum())
    return np.array(shares)


def decoded_train_bytes():
    """Decoded bytes of the training tiles: bands of every date (uint16) and labels (uint8)."""
    return 2 * PIXELS * PIXELS * (len(DATES) * len(BANDS) * 2 + 1)


# ----------------------------------------------------------------------------- streams

def loader(daemon, order, seed, epoch, samples, batch, max_batches=0):
    """The training stream of one epoch; `order` is ("random"|"local", open_blocks, visits)."""
    kind, open_blocks, visits = order
    return cogfeed.Loader(daemon.address, "quality", sampler="random", patch_size=PATCH, batch_size=batch,
                          seed=seed, epoch=epoch, samples_per_epoch=samples, max_batches=max_batches,
                          order=kind, open_blocks=open_blocks, visits=visits)


def fingerprint(batches):
    """What identifies a stream's samples: each sample's bounds and drawn Item."""
    return [(m.bounds, m.drawn) for b in batches for m in b.meta]


def default_dial(daemon, items, workdir, cache_bytes, samples, batch, probe=4):
    """The `open_blocks` a daemon with a `cache_bytes` tile cache picks by default for the
    training stream: the k whose first `probe` batches on `daemon` equal the default ones."""
    small = svc.Daemon(Path(workdir) / "dial", {}, capacity_bytes=cache_bytes, extra_toml=datasets_toml(items)).start()
    try:
        want = fingerprint(loader(small, ("local", 0, 0), 0, 0, samples, batch, probe))
    finally:
        small.stop()
    for k in range(1, 65):
        if fingerprint(loader(daemon, ("local", k, 1), 0, 0, samples, batch, probe)) == want:
            return k
    sys.exit("no open_blocks in 1..64 gives the default dial's first batches")


def validation_set(daemon):
    """The validation tile's grid cover (stride 64), each footprint once: (inputs, labels)."""
    import torch

    seen, xs, ys = set(), [], []
    val = cogfeed.Loader(daemon.address, "quality-val", sampler="grid", patch_size=PATCH, stride=VAL_STRIDE,
                         batch_size=64)
    for b in val:
        keep = [i for i, m in enumerate(b.meta) if m.bounds not in seen]
        seen.update(b.meta[i].bounds for i in keep)
        xs.append(to_input(b.layers["s2"][keep]))
        ys.append(torch.from_numpy(b.layers["label"][keep, 0].astype(np.int64)))
    return torch.cat(xs), torch.cat(ys)


def to_input(s2):
    """uint16 [B, T, C, H, W] -> float32 [B, T·C, H, W], scaled by fixed constants."""
    import torch

    x = torch.from_numpy(s2.astype(np.float32))
    return ((x - NORM_MEAN) / NORM_STD).flatten(1, 2)


def positions(batch):
    """Per sample [B, 4], in metres: the footprint's centre (x, y) and top-left corner (x, y)."""
    return np.array([((m.bounds[0] + m.bounds[2]) / 2, (m.bounds[1] + m.bounds[3]) / 2, m.bounds[0], m.bounds[3])
                     for m in batch.meta])


# ----------------------------------------------------------------------------- model and training

def make_model(seed):
    """The CNN, initialised from `seed`: three 3×3 convolutions (dilation 1, 2, 4) with batch
    norm and ReLU, then 1×1 to per-pixel class logits."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    width, layers, c_in = 16, [], len(DATES) * len(BANDS)
    for dilation in (1, 2, 4):
        layers += [nn.Conv2d(c_in, width, 3, padding=dilation, dilation=dilation, bias=False),
                   nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        c_in = width
    layers.append(nn.Conv2d(width, len(CLASSES), 1))
    return nn.Sequential(*layers)


def train(daemon, order, seed, steps, samples, batch, val):
    """One training run: (model, sample positions per batch per epoch, validation accuracy at
    the end of each epoch, seconds spent training)."""
    import torch

    model = make_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=3e-4)
    per_epoch = samples // batch
    seen, curve, step, busy = [], [], 0, 0.0
    for epoch in range((steps + per_epoch - 1) // per_epoch):
        seen.append([])
        t0 = time.perf_counter()
        model.train()
        for b in loader(daemon, order, seed, epoch, samples, batch, min(per_epoch, steps - step)):
            x = to_input(b.layers["s2"])
            y = torch.from_numpy(b.layers["label"][:, 0].astype(np.int64))
            loss = torch.nn.functional.cross_entropy(model(x), y, ignore_index=255)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            seen[-1].append(positions(b))
            step += 1
        busy += time.perf_counter() - t0
        curve.append(evaluate(model, val)[0])
    return model, seen, curve, busy


def recalibrated(model, daemon, samples, batch, batches=16):
    """A copy of `model` whose batch-norm statistics are re-estimated (a plain average) over
    `batches` batches of one fixed random-order stream; the weights are untouched."""
    import copy

    import torch

    model = copy.deepcopy(model)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for b in loader(daemon, ("random", 0, 0), 12345, 0, samples, batch, batches):
            model(to_input(b.layers["s2"]))
    return model


def evaluate(model, val):
    """(pixel accuracy, mIoU) on the validation set."""
    import torch

    x, y = val
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x[i:i + 256]).argmax(1) for i in range(0, len(x), 256)])
    k = len(CLASSES)
    confusion = torch.bincount((y * k + pred).flatten(), minlength=k * k).reshape(k, k).double()
    tp = confusion.diag()
    iou = tp / (confusion.sum(0) + confusion.sum(1) - tp).clamp(min=1)
    return float(tp.sum() / confusion.sum()), float(iou.mean())


# ----------------------------------------------------------------------------- diversity

def wasserstein1(a, b):
    """1-D Wasserstein-1 distance between the empirical distributions of `a` and `b`."""
    a, b = np.sort(a), np.sort(b)
    grid = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(a, grid[:-1], side="right") / len(a)
    cdf_b = np.searchsorted(b, grid[:-1], side="right") / len(b)
    return float(np.sum(np.abs(cdf_a - cdf_b) * np.diff(grid)))


def groups_of(pos):
    """The distinct source groups of `positions` rows: the reference blocks (512² tiles) the
    footprints start in, which is how the daemon groups a locality order."""
    size = TILE * RES
    col = np.floor((pos[:, 2] - X0 + RES / 2) / size).astype(int)
    row = np.floor((Y0 - pos[:, 3] + RES / 2) / size).astype(int)
    return set(zip(col, row))


def diversity(seen, window):
    """(mean distinct groups, mean distance in km) over the non-overlapping windows of `window`
    consecutive batches of every epoch."""
    groups, dist = [], []
    for epoch in seen:
        everything = np.concatenate(epoch)
        for i in range(0, len(epoch) - window + 1, window):
            xy = np.concatenate(epoch[i:i + window])
            groups.append(len(groups_of(xy)))
            dist.append((wasserstein1(xy[:, 0], everything[:, 0]) + wasserstein1(xy[:, 1], everything[:, 1])) / 2000)
    return float(statistics.mean(groups)), float(statistics.mean(dist))


# ----------------------------------------------------------------------------- report

def summarise(runs):
    """Mean, min and max of each figure over a configuration's seeds."""
    out = {}
    for key, value in runs[0].items():
        if key == "seed" or isinstance(value, list):
            continue
        v = [r[key] for r in runs]
        out[key] = {"mean": statistics.mean(v), "min": min(v), "max": max(v),
                    "std": statistics.stdev(v) if len(v) > 1 else 0.0}
    return out


def print_table(results):
    """The results as a Markdown table: scores over the seeds, diversity per window."""
    head = "| configuration | accuracy % mean (min–max) | mIoU % mean (min–max) | BN re-estimated: accuracy, mIoU % |"
    head += "".join(f" groups / {w} batches | distance / {w} batches (km) |" for w in WINDOWS)
    print("\n" + head)
    print("|---|---:|---:|---:|" + "---:|---:|" * len(WINDOWS))
    for name, r in results.items():
        s = r["summary"]
        row = f"| {name} |"
        for key in ("accuracy", "miou"):
            row += f" {100 * s[key]['mean']:.1f} ({100 * s[key]['min']:.1f}–{100 * s[key]['max']:.1f}) |"
        row += f" {100 * s['accuracy_bn']['mean']:.1f}, {100 * s['miou_bn']['mean']:.1f} |"
        for w in WINDOWS:
            row += f" {s[f'groups_{w}']['mean']:.1f} | {s[f'distance_{w}']['mean']:.2f} |"
        print(row)


def one_run(daemon, order, seed, a, val):
    """Train, score and measure one (configuration, seed)."""
    model, seen, curve, seconds = train(daemon, order, seed, a.steps, a.samples_per_epoch, a.batch, val)
    acc, miou = evaluate(model, val)
    acc_bn, miou_bn = evaluate(recalibrated(model, daemon, a.samples_per_epoch, a.batch), val)
    run = {"seed": seed, "accuracy": acc, "miou": miou, "accuracy_bn": acc_bn, "miou_bn": miou_bn,
           "train_s": seconds, "epoch_accuracy": curve}
    for w in WINDOWS:
        run[f"groups_{w}"], run[f"distance_{w}"] = diversity(seen, w)
    return run


def describe(a, shares, val, k):
    """One line on the archive, the validation set and the default dial."""
    print(f"archive {a.data}: 2 training tiles + 1 validation tile of {PIXELS}², {len(DATES)} dates, {TILE}² COG "
          "tiles; per training block, each class's share ranges "
          + ", ".join(f"{n} {100 * shares[:, i].min():.0f}–{100 * shares[:, i].max():.0f} %"
                      for i, n in enumerate(CLASSES))
          + f"; validation {len(val[0])} patches; default dial for a {a.dial_cache_mib} MiB tile cache: "
          f"open_blocks = {k}; {a.steps} steps of {a.batch}, epochs of {a.samples_per_epoch} samples", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "cogfeed-bench" / "quality")
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--samples-per-epoch", type=int, default=4096)
    ap.add_argument("--dial-cache-mib", type=int, default=decoded_train_bytes() // 4 >> 20,
                    help="the tile cache the default dial is sized for (default: a quarter of the training tiles)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--configs", default="random,default,tight",
                    help="comma-separated: random, default, tight, or default-vV (the default dial with visits = V)")
    a = ap.parse_args()
    if not shutil.which("gdal_translate"):
        sys.exit("gdal_translate is needed (apt install gdal-bin)")
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    seeds = [int(s) for s in a.seeds.split(",")]
    t_start = time.perf_counter()
    items = write_archive(a.data)
    shares = block_shares(a.data)
    out = {"steps": a.steps, "batch": a.batch, "samples_per_epoch": a.samples_per_epoch, "seeds": seeds,
           "dial_cache_mib": a.dial_cache_mib, "block_class_shares": shares.round(4).tolist(), "results": {}}
    with tempfile.TemporaryDirectory() as work:
        daemon = svc.Daemon(Path(work) / "main", {}, capacity_bytes=2 << 30, extra_toml=datasets_toml(items)).start()
        try:
            val = validation_set(daemon)
            k = out["default_open_blocks"] = default_dial(daemon, items, work, a.dial_cache_mib << 20,
                                                          a.samples_per_epoch, a.batch)
            describe(a, shares, val, k)
            known = {"random": ("random", ("random", 0, 0)),
                     "default": (f"local, default dial (open_blocks {k}, visits 1)", ("local", k, 1)),
                     "tight": ("local, tight dial (open_blocks 1, visits 1)", ("local", 1, 1))}
            configs = {}
            for c in a.configs.split(","):
                if c.startswith("default-v"):
                    v = int(c.removeprefix("default-v"))
                    configs[f"local, default dial, more visits (open_blocks {k}, visits {v})"] = ("local", k, v)
                else:
                    name, order = known[c]
                    configs[name] = order
            # Prime the cache (one locality-ordered pass decodes each tile about once).
            for _ in loader(daemon, ("local", 1, 1), 0, 0, a.samples_per_epoch, a.batch):
                pass
            for name, order in configs.items():
                runs = []
                for seed in seeds:
                    run = one_run(daemon, order, seed, a, val)
                    runs.append(run)
                    print(f"{name:45} seed {seed}: accuracy {100 * run['accuracy']:5.1f} %  mIoU "
                          f"{100 * run['miou']:5.1f} %  (BN re-estimated {100 * run['accuracy_bn']:5.1f} %, "
                          f"{100 * run['miou_bn']:5.1f} %)  groups/4 batches {run['groups_4']:5.1f}  "
                          f"distance/4 batches {run['distance_4']:5.2f} km  ({run['train_s']:.0f} s)", flush=True)
                    out["results"][name] = {"order": order, "runs": runs, "summary": summarise(runs)}
                    out["wall_s"] = time.perf_counter() - t_start
                    if a.json:  # after every run: a long bench keeps what it measured
                        a.json.write_text(json.dumps(out, indent=1))
        finally:
            daemon.stop()
    print_table(out["results"])
    print(f"\nwall time {out['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
