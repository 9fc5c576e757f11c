"""PyTorch integration: `StreamDataset`, an IterableDataset of ready batches.

Use with `DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)`: the daemon
already batches. Rank and world size come from `torch.distributed` when it is initialised,
else from the `RANK` / `WORLD_SIZE` environment variables. With `num_workers > 0` each worker
takes its own share of the rank's samples (worker w of n acts as rank `rank * n + w` of
`world * n`), so nothing is duplicated; give the DataLoader `multiprocessing_context="spawn"`
(gRPC channels opened in a forked child of a process that used gRPC can hang). Epoch and cursor (`state_dict`, `set_epoch`, `len`)
are kept by `EpochCursor`, as for `Loader`.

Each batch is a dict whose top-level keys are fixed (`KEYS`); whatever a dataset names
(layers, time masks, point attributes) is in a nested dict of its own, so no name can
collide with a fixed key: `batch["layers"]["meta"]` is a layer called "meta",
`batch["meta"]` the samples' metadata.
"""

import inspect
import os
import warnings
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.utils.data

from ._client import Batch, Client, Loader
from ._state import EpochCursor

#: The top-level keys of every batch dict, always present (`None`, or empty, when the
#: dataset has none): image [B, C, H, W] (map-space: the reference layer, the first of
#: `layers`), label [B, H, W] or None (scene datasets with `labels=True`), windows [B, 7]
#: int64, epoch, index, cursor, skipped (`SkippedSample`s), meta (a `SampleMeta` per sample,
#: map-space), layers ({name: [B, C, H_l, W_l] or [B, T, C, H_l, W_l]}), time_masks ({time
#: layer: bool [B, T]}), targets ({point attribute: float64 [B]}).
KEYS = ("image", "label", "windows", "epoch", "index", "cursor", "skipped", "meta", "layers", "time_masks",
        "targets")


def _rank_world() -> Tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over the received bytes (no copy); bfloat16 arrays (uint16 bits marked so by
    `cogfeed._tensor.numpy_dtype`) become bfloat16 tensors."""
    with warnings.catch_warnings():
        # The received bytes are read-only; training does not write into its inputs.
        warnings.simplefilter("ignore", UserWarning)
        metadata = array.dtype.metadata
        if metadata is None or metadata.get("cogfeed") != "bfloat16":
            return torch.from_numpy(array)
        if array.size == 0:
            # A batch whose samples were all skipped: torch.frombuffer refuses empty buffers.
            return torch.empty(array.shape, dtype=torch.bfloat16)
        return torch.frombuffer(array.data, dtype=torch.bfloat16).view(array.shape)


def to_tensors(batch: Batch) -> Dict[str, Any]:
    """A `cogfeed.Batch` as the dict `StreamDataset` yields (keys: `KEYS`), tensors over the
    batch's arrays (no copy)."""
    return {
        "image": _tensor(batch.image),
        "label": None if batch.label is None else _tensor(batch.label),
        "windows": torch.from_numpy(batch.windows),
        "epoch": batch.epoch,
        "index": batch.index,
        "cursor": batch.cursor,
        "skipped": batch.skipped,
        "meta": batch.meta,
        # Map-space datasets: one tensor per layer, by name (the first is also "image").
        "layers": {name: _tensor(array) for name, array in batch.layers.items()},
        # Time layers: which steps hold a date.
        "time_masks": {name: _tensor(mask).bool() for name, mask in batch.time_masks.items()},
        # The points sampler: the points' attributes.
        "targets": {name: _tensor(v) for name, v in batch.targets.items()},
    }


class StreamDataset(EpochCursor, torch.utils.data.IterableDataset):
    """Batches of one dataset (or a `mixture=`) as dicts of tensors (see `KEYS`):

    - `batch["image"]` [B, C, H, W], `batch["label"]` [B, H, W] or None, `batch["windows"]`
      [B, 7] int64 (scene, col, row, width, height, level, padded 0/1), `epoch`, `index`,
      `cursor`, `skipped` (list of `cogfeed.SkippedSample`), `meta` (a `SampleMeta` per
      sample of a map-space dataset, else empty);
    - `batch["layers"][name]`: map-space datasets, one tensor per layer, [B, C, H_l, W_l]
      (time layers [B, T, C, H_l, W_l]); `image` is the first of them;
    - `batch["time_masks"][name]`: time layers, bool [B, T], True where the step holds a date;
    - `batch["targets"][name]`: the points sampler, each attribute float64 [B].

    B is below batch_size, even 0, when the server skipped unreadable samples
    (`on_corrupt="skip"`). `loader_args` are `cogfeed.Loader`'s keywords (`sampler`,
    `patch_size`, `batch_size`, ..., `token`, `tls`) except `rank` and `world_size`, which
    come from torch.distributed or RANK/WORLD_SIZE; an unknown one is a TypeError here.
    """

    def __init__(self, address: Union[str, Sequence[str], Client], dataset: Optional[str], **loader_args: Any) -> None:
        for k in ("rank", "world_size"):
            if k in loader_args:
                raise TypeError(f"{k} comes from torch.distributed or RANK/WORLD_SIZE")
        # Unknown keywords fail now, not in the first iteration (nothing is dialled here).
        inspect.signature(Loader).bind(address, dataset, **loader_args)
        EpochCursor.__init__(self, loader_args.pop("epoch", 0), loader_args.pop("cursor", 0),
                             loader_args.pop("dataset_version", ""))
        self.address = address
        self.dataset = dataset
        self.loader_args = loader_args

    def _rank_world(self) -> Tuple[int, int]:
        """This process's rank and world size (a subclass may take them from elsewhere)."""
        return _rank_world()

    def _loader(self, cursor: int) -> Loader:
        rank, world = self._rank_world()
        info = torch.utils.data.get_worker_info()
        if info is not None:
            rank, world = rank * info.num_workers + info.id, world * info.num_workers
        return Loader(self.address, self.dataset, rank=rank, world_size=world, epoch=self.epoch,
                      cursor=cursor, dataset_version=self.dataset_version, **self.loader_args)

    def _count(self, cursor: int) -> int:
        return len(self._loader(cursor))

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        loader = self._loader(self._begin())
        for b in loader:
            self.cursor = b.cursor
            self.dataset_version = b.dataset_version
            yield to_tensors(b)
        self._end()
