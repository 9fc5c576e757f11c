"""PyTorch integration: `StreamDataset`, an IterableDataset of ready batches.

Use with `DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)`: the daemon
already batches. Rank and world size come from `torch.distributed` when it is initialised,
else from the `RANK` / `WORLD_SIZE` environment variables. With `num_workers > 0` each worker
takes its own share of the rank's samples (worker w of n acts as rank `rank * n + w` of
`world * n`), so nothing is duplicated; give the DataLoader `multiprocessing_context="spawn"`
(gRPC channels opened in a forked child of a process that used gRPC can hang). Epoch and cursor (`state_dict`, `set_epoch`, `len`)
are kept by `EpochCursor`, as for `Loader`.
"""

import os
import warnings

import torch
import torch.utils.data

from ._client import Loader
from ._state import EpochCursor


def _rank_world():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _tensor(array, bfloat16=False):
    """A tensor over the received bytes (no copy)."""
    with warnings.catch_warnings():
        # The received bytes are read-only; training does not write into its inputs.
        warnings.simplefilter("ignore", UserWarning)
        if not bfloat16:
            return torch.from_numpy(array)
        if array.size == 0:
            # A batch whose samples were all skipped: torch.frombuffer refuses empty buffers.
            return torch.empty(array.shape, dtype=torch.bfloat16)
        return torch.frombuffer(array.data, dtype=torch.bfloat16).view(array.shape)


class StreamDataset(EpochCursor, torch.utils.data.IterableDataset):
    """Batches of one dataset as dicts of tensors (map-space datasets add one tensor per layer
    by name, [B, C, H_l, W_l], and "meta", a `SampleMeta` per sample): image [B, C, H, W], label [B, H, W] or None,
    windows [B, 7] int64 (scene, col, row, width, height, level, padded 0/1), epoch, index,
    cursor, and skipped (list of `cogfeed.SkippedSample`). B is below batch_size, even 0,
    when the server skipped unreadable samples (`on_corrupt="skip"`)."""

    def __init__(self, address, dataset, **loader_args):
        for k in ("rank", "world_size"):
            if k in loader_args:
                raise TypeError(f"{k} comes from torch.distributed or RANK/WORLD_SIZE")
        EpochCursor.__init__(self, loader_args.pop("epoch", 0), loader_args.pop("cursor", 0))
        self.address = address
        self.dataset = dataset
        self.loader_args = loader_args
        self._dtype = loader_args.get("dtype", "native")

    def _loader(self, cursor):
        rank, world = _rank_world()
        info = torch.utils.data.get_worker_info()
        if info is not None:
            rank, world = rank * info.num_workers + info.id, world * info.num_workers
        return Loader(self.address, self.dataset, rank=rank, world_size=world, epoch=self.epoch,
                      cursor=cursor, **self.loader_args)

    def _count(self, cursor):
        return len(self._loader(cursor))

    def __iter__(self):
        loader = self._loader(self._begin())
        for b in loader:
            self.cursor = b.cursor
            out = {
                "image": _tensor(b.image, bfloat16=self._dtype == "bfloat16"),
                "label": None if b.label is None else _tensor(b.label),
                "windows": torch.from_numpy(b.windows),
                "epoch": b.epoch,
                "index": b.index,
                "cursor": b.cursor,
                "skipped": b.skipped,
            }
            # Map-space datasets: one tensor per layer by name (the first is also "image"),
            # and the samples' metadata.
            for name, array in b.layers.items():
                out[name] = _tensor(array)
            if b.layers:
                out["meta"] = b.meta
            # Time layers: which steps hold a date, bool [B, T].
            for name, mask in b.time_masks.items():
                out[f"{name}_mask"] = _tensor(mask).bool()
            # The points sampler: the points' attributes, float64 [B].
            if b.targets:
                out["targets"] = {name: _tensor(v) for name, v in b.targets.items()}
            yield out
        self._end()
