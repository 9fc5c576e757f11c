#!/usr/bin/env python3
"""The peer: the loading method of Zaytar et al. 2025 (arXiv 2506.06235), re-implemented.

Owns one measurement of that method. What it does, as in the paper's code
(github.com/microsoft/pytorch-cloud-geotiff-optimization, `TileDataset`,
`RandomBlockSampler`, `bayesian_search.evaluate_dataloader_config`):

- a torch `DataLoader` over a map-style dataset whose items are (scene, y, x, size);
  each item is one `rasterio.open(url)` + `read(window=...)` of every band, then
  `torch.from_numpy(...).float()` (float32); batches are stacked by the default collate;
- sampler `random`: uniform random window in a uniformly chosen scene; `block`: a random
  block of the tile grid and a random offset that keeps the window inside that block
  (windows larger than a block start on a block corner);
- `num_threads` > 1 reads the items of a sampler chunk on a thread pool in each worker;
- without torch (or with PEER_LOADER=pool): a fork `multiprocessing` pool in its place,
  one batch per task, workers x prefetch batches in flight, numpy float32 batches;
- persistent workers, `prefetch_factor`, metric = decoded pixels x bytes per stored pixel
  (2 for uint16) / wall time, MB/s.

Reads go to `/vsicurl/http://...` (GDAL bundled with the rasterio wheel). Nothing is
opened in the parent before the workers fork (a probe for scene sizes runs in a spawned
child), so no worker shares another's HTTP connection. GDAL options set (the paper's code
sets none; these two only remove wasted requests, so they favour the peer):
GDAL_DISABLE_READDIR_ON_OPEN=EMPTY_DIR, CPL_VSIL_CURL_ALLOWED_EXTENSIONS=.tif; everything
else is GDAL's default (VSI_CACHE off, /vsicurl/ 16 MB region cache per process).

Presets (the paper's configs.yaml): `default` = 4 workers, 1 thread, prefetch 2, random,
256 px; `tuned` = the paper's remote-optimal (64 workers there, 1 thread, prefetch 8, block
sampler, 256 px); `--workers` overrides the worker count (run.py scales it to this machine).

    python3 client/bench/peer.py --preset tuned --workers 32 --batch-size 16 \
        --duration 15 --max-samples 2048 http://127.0.0.1:8081/deflate/scene_00.tif ...

Prints one JSON object. `mb_per_s` (the figure run.py compares): samples read by all workers
in a window of --duration seconds that opens once every worker has read a sample, x pixels
x 2 bytes, per second. Counted per sample (a shared counter), because with many workers
whole batches arrive in bursts and a short window of batches would overstate the rate.
Also `e2e_mb_per_s` (delivered batches from the start, as the paper timed it, start-up
included), `first_batch_s`, `cpu_s_per_gb` (this process and its workers in the window).
"""

import argparse
import json
import os
import sys
import threading
import time
import warnings

os.environ.setdefault("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR")
os.environ.setdefault("CPL_VSIL_CURL_ALLOWED_EXTENSIONS", ".tif")

warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: on purpose

try:
    import torch  # noqa: F401  (imported before any worker forks, as in a training script)

    HAVE_TORCH = os.environ.get("PEER_LOADER", "torch") == "torch"
except ImportError:
    HAVE_TORCH = False


def torch_version():
    import torch

    return torch.__version__


PRESETS = {
    "default": dict(workers=4, threads=1, prefetch=2, sampler="random", patch=256),
    "tuned": dict(workers=64, threads=1, prefetch=8, sampler="block", patch=256),
}


def probe(urls):
    """(height, width) of each scene and the block shape, read in a spawned child."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_probe, (urls,))


def _probe(urls):
    import rasterio

    sizes, block = [], None
    for u in urls:
        with rasterio.open(u) as f:
            sizes.append(f.shape)
            block = block or f.block_shapes[0]
    return sizes, block


class TileDataset:
    """Map-style dataset: an item (scene, y, x, size) -> float32 tensor [C, size, size].

    `done[worker]` counts the samples each worker has read (shared memory, for measuring
    the rate without the burstiness of whole batches; not part of the paper's method)."""

    def __init__(self, urls, threads=1, done=None):
        self.urls = urls
        self.threads = threads
        self.pool = None
        self.done = done
        self.lock = None

    def load(self, idx):
        import rasterio
        from rasterio.windows import Window

        i, y, x, size = idx
        with rasterio.open(self.urls[i]) as f:
            data = f.read(window=Window(x, y, size, size))
        if HAVE_TORCH:
            import torch

            out = torch.from_numpy(data).float()
            info = torch.utils.data.get_worker_info()
            slot = info.id if info else _POOL_SLOT
        else:
            out, slot = data.astype("float32"), _POOL_SLOT
        if self.done is not None:
            if self.threads > 1:
                import threading

                self.lock = self.lock or threading.Lock()
                with self.lock:
                    self.done[slot] += 1
            else:
                self.done[slot] += 1
        return out

    def __getitem__(self, idx):
        if isinstance(idx, tuple):
            return self.load(idx)
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads)
        return list(self.pool.map(self.load, idx))


_POOL_SLOT = 0


def _pool_worker(slot, dataset, tasks, results):
    """One worker process of the fallback loader: batches of items in, float32 arrays out."""
    import numpy as np

    global _POOL_SLOT
    _POOL_SLOT = slot
    try:  # die with the parent (PR_SET_PDEATHSIG), as torch's workers do by polling
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    except OSError:
        pass
    while True:
        seq, items = tasks.get()
        out = []
        for item in items:
            got = dataset[item]
            out.extend(got if isinstance(got, list) else [got])
        results.put((seq, np.stack(out)))


class PoolLoader:
    """Without torch: `workers` forked processes; as in a DataLoader, each task is one whole
    batch, at most workers x prefetch batches are in flight, delivered in order."""

    def __init__(self, dataset, sampler, batch_size, workers, prefetch):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.sampler, self.batch_size, self.inflight = sampler, batch_size, max(1, workers) * prefetch
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.procs = [ctx.Process(target=_pool_worker, args=(i, dataset, self.tasks, self.results), daemon=True)
                      for i in range(max(1, workers))]
        for w in self.procs:
            w.start()

    def __iter__(self):
        items = iter(self.sampler)
        per_task = max(1, self.batch_size // max(1, self.sampler.threads))
        sent = received = 0
        ready = {}
        while True:
            while sent - received < self.inflight:
                chunk = [s for _, s in zip(range(per_task), items)]
                if not chunk:
                    break
                self.tasks.put((sent, chunk))
                sent += 1
            if received == sent:
                return
            while received not in ready:
                seq, batch = self.results.get()
                ready[seq] = batch
            yield ready.pop(received)
            received += 1

    def close(self):
        for w in self.procs:
            w.kill()
        for w in self.procs:
            w.join()


class RandomBlockSampler:
    """The paper's sampler: `length` windows, seeded; chunks of `threads` items when > 1."""

    def __init__(self, sizes, patch, length, block=None, threads=1, seed=0):
        self.sizes, self.patch, self.length = sizes, patch, length
        self.block, self.threads, self.seed = block, threads, seed

    def __len__(self):
        return self.length // self.threads

    def windows(self):
        import numpy as np

        rng = np.random.RandomState(self.seed)
        p = self.patch
        for _ in range(self.length):
            i = rng.randint(len(self.sizes))
            h, w = self.sizes[i]
            if self.block is None:
                x, y = rng.randint(0, w - p), rng.randint(0, h - p)
            else:
                by, bx = self.block
                row = rng.randint(0, max(1, (h - p) // by))
                col = rng.randint(0, max(1, (w - p) // bx))
                y0, x0 = row * by, col * bx
                y = y0 + rng.randint(0, max(1, min(by - p, h - y0 - p) + 1)) if p <= by else min(y0, h - p)
                x = x0 + rng.randint(0, max(1, min(bx - p, w - x0 - p) + 1)) if p <= bx else min(x0, w - p)
            yield (int(i), int(min(y, h - p)), int(min(x, w - p)), p)

    def __iter__(self):
        it = self.windows()
        if self.threads == 1:
            yield from it
            return
        chunk = []
        for s in it:
            chunk.append(s)
            if len(chunk) == self.threads:
                yield chunk
                chunk = []


def flatten_collate(batch):
    import torch

    return torch.stack([t for chunk in batch for t in chunk])


def tree_cpu(proc):
    """CPU seconds of a process and its live descendants."""
    import psutil

    total = 0.0
    for p in [proc] + proc.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def measure(urls, preset, workers, threads, prefetch, sampler, patch, batch_size, duration,
            max_samples, seed, sizes=None, block=None):
    """Runs the loader; the rate counts samples read by the workers after the first batch."""
    import multiprocessing

    import psutil

    if sizes is None:
        sizes, block = probe(urls)
    done = multiprocessing.Array("q", max(1, workers), lock=False)
    sampler_obj = RandomBlockSampler(sizes, patch, 10_000_000, block if sampler == "block" else None, threads, seed)
    dataset = TileDataset(urls, threads, done)
    if HAVE_TORCH:
        from torch.utils.data import DataLoader

        loader = DataLoader(dataset, sampler=sampler_obj, batch_size=batch_size,
                            num_workers=workers, persistent_workers=workers > 0,
                            prefetch_factor=prefetch if workers > 0 else None,
                            collate_fn=flatten_collate if threads > 1 else None)
    else:
        loader = PoolLoader(dataset, sampler_obj, batch_size, workers, prefetch)
    me = psutil.Process()
    # The window opens once every worker has read a sample (all started, connections open)
    # and closes --duration seconds later (or at --max-samples delivered). Batches are
    # consumed on a thread so that the window does not depend on when whole batches arrive.
    win, stop = {}, threading.Event()
    got = {"samples": 0, "first": None, "px2": None}

    def consume():
        for batch in loader:
            got["samples"] += batch.shape[0]
            if got["first"] is None:
                got["first"], got["px2"] = time.perf_counter(), batch.shape[1] * patch * patch * 2
            if stop.is_set() or got["samples"] >= max_samples:
                break
        stop.set()

    start = time.perf_counter()
    threading.Thread(target=consume, daemon=True).start()
    while not stop.is_set():
        if "t0" not in win and min(done) > 0:
            win.update(t0=time.perf_counter(), read0=sum(done), cpu0=tree_cpu(me))
        if "t0" in win and time.perf_counter() - win["t0"] >= duration:
            break
        stop.wait(0.02)
    stop.set()
    win.update(t1=time.perf_counter(), read1=sum(done), cpu1=tree_cpu(me))
    if "t0" not in win:
        raise SystemExit("the window never opened: a worker read nothing")
    end = time.perf_counter()
    while got["px2"] is None and time.perf_counter() - end < 60:  # the size of a sample
        time.sleep(0.05)
    samples, first, px2 = got["samples"], got["first"] or end, got["px2"]
    read_bytes = (win["read1"] - win["read0"]) * px2
    span = win["t1"] - win["t0"]
    out = {
        "preset": preset, "workers": workers, "threads": threads, "prefetch": prefetch,
        "sampler": sampler, "patch": patch, "batch_size": batch_size,
        "samples": samples, "seconds": end - start, "window_s": span,
        "bytes": samples * px2, "bytes_after": read_bytes, "read_bytes_total": sum(done) * px2,
        "mb_per_s": read_bytes / span / 1e6,
        "e2e_mb_per_s": samples * px2 / (end - start) / 1e6,
        "first_batch_s": first - start, "window_start_s": win["t0"] - start,
        "cpu_s_per_gb": (win["cpu1"] - win["cpu0"]) / (read_bytes / 1e9) if read_bytes else None,
        "cpu_s": win["cpu1"] - win["cpu0"],
        "loader": "torch DataLoader " + torch_version() if HAVE_TORCH else "multiprocessing pool",
    }
    if not HAVE_TORCH:
        loader.close()
        return out
    it = getattr(loader, "_iterator", None)
    if getattr(it, "_worker_pids_set", False):  # workers ending is expected from now on
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(it))
        it._worker_pids_set = False
    for w in getattr(it, "_workers", []):  # end the workers now, not after their timeouts
        w.terminate()
    for w in getattr(it, "_workers", []):
        w.join()
    del loader
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("urls", nargs="+", help="http:// URLs of the scenes (read through /vsicurl/)")
    ap.add_argument("--preset", choices=PRESETS, default="default")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--prefetch", type=int)
    ap.add_argument("--sampler", choices=["random", "block"])
    ap.add_argument("--patch-size", type=int)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds after the first batch")
    ap.add_argument("--max-samples", type=int, default=10_000_000, help="stop after this many samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scene-size", help="HxW of every scene and BHxBW block, e.g. 4096x4096,512x512 (skips the probe)")
    a = ap.parse_args()
    p = dict(PRESETS[a.preset])
    for k, v in (("workers", a.workers), ("threads", a.threads), ("prefetch", a.prefetch),
                 ("sampler", a.sampler), ("patch", a.patch_size)):
        if v is not None:
            p[k] = v
    sizes = block = None
    if a.scene_size:
        s, b = a.scene_size.split(",")
        sizes = [tuple(int(v) for v in s.split("x"))] * len(a.urls)
        block = tuple(int(v) for v in b.split("x"))
    urls = ["/vsicurl/" + u if u.startswith("http") else u for u in a.urls]
    out = measure(urls, a.preset, p["workers"], p["threads"], p["prefetch"], p["sampler"], p["patch"],
                  a.batch_size, a.duration, a.max_samples, a.seed, sizes, block)
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # do not wait for a slow teardown of many workers


if __name__ == "__main__":
    main()
