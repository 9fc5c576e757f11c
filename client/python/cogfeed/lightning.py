"""Lightning integration: `CogfeedDataModule`, a `LightningDataModule` whose train, val and
test dataloaders stream one dataset's splits, resumable mid-epoch from Lightning's checkpoints.

`CogfeedDataModule(address, dataset, train="train", val="val", test=None, **loader_args)`:
each stage streams the daemon's `split` of that name (map-space datasets with a
`[datasets.split]`; "" streams the whole dataset, None gives the stage no dataloader) through
`cogfeed.torch.StreamDataset` (batches made by the daemon: `DataLoader(batch_size=None)`, the
batch dicts of `cogfeed.torch.KEYS`). `loader_args` are `cogfeed.Loader`'s keywords for every
stage; `eval_args` override them for val and test (e.g. `augment=False`).

Ranks: at `setup`, rank and world size are the trainer's (`global_rank`, `world_size`), so
each DDP process streams its own share of every step, disjoint from the others'.

Epochs: the train stream's epoch is the trainer's `current_epoch` (each epoch a new seeded
plan); val and test streams replay epoch 0, the same samples each time.

Resume: the module records the cursor of each training batch as it goes to the model
(`on_before_batch_transfer`, after Lightning's prefetch, so a batch fetched ahead is not
counted), and `state_dict()` is `{"epoch", "cursor", "dataset_version"}` of the last one,
which Lightning writes into every checkpoint; `Trainer.fit(..., ckpt_path=...)` loads it
back and the train stream resumes after the last batch trained on, with no sample repeated
and none lost (a dataset changed since is refused, `FailedPrecondition`). A LightningModule
that overrides `on_before_batch_transfer` too is still called (from the module's hook).
The DataLoaders have no workers: the daemon decodes and batches, the client only receives.

Needs lightning 2.x (`pip install 'cogfeed[lightning]'`; `pytorch_lightning` also works).
"""

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

try:
    import torch.utils.data

    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]
except ImportError as e:  # pragma: no cover - exercised only where lightning is missing
    raise ImportError("cogfeed.lightning needs lightning (and torch): pip install 'cogfeed[lightning]'") from e

from ._client import Client
from .torch import StreamDataset

#: The Loader keywords the module sets itself (from the trainer and the checkpoint).
_OWN = ("rank", "world_size", "epoch", "cursor", "dataset_version", "split")


class _StageStream(StreamDataset):
    """A `StreamDataset` with the trainer's rank and world size, and (train) its epoch."""

    def __init__(self, address: Any, dataset: str, rank: int, world: int,
                 epoch_of: Optional[Callable[[], int]], **loader_args: Any) -> None:
        super().__init__(address, dataset, **loader_args)
        self._rank, self._world, self._epoch_of = rank, world, epoch_of

    def _rank_world(self) -> Tuple[int, int]:
        return self._rank, self._world

    def __len__(self) -> int:
        # The whole pass, also when resuming: Lightning counts the batches trained before the
        # checkpoint towards the epoch (its loop ends the epoch at this many).
        return self._count(0)

    def __iter__(self):  # type: ignore[no-untyped-def]
        if self._epoch_of is None:
            # val / test: every pass the same samples, from the start (Lightning may stop
            # reading at len() batches, before the stream has said it ended).
            self.set_epoch(self.epoch)
        elif self._epoch_of() != self.epoch:
            self.set_epoch(self._epoch_of())
        return super().__iter__()


class _Loader(torch.utils.data.DataLoader):
    """A DataLoader Lightning counts as resumable (its `_Stateful`): the resume point itself
    is the datamodule's state, which Lightning saves and loads before making the loaders."""

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        pass


class CogfeedDataModule(pl.LightningDataModule):
    """One dataset's splits as Lightning's train/val/test dataloaders (module doc).

    `train`, `val`, `test`: the split each stage streams ("" the whole dataset, None no
    dataloader for that stage). `loader_args`: `cogfeed.Loader` keywords (`sampler`,
    `patch_size`, `batch_size`, `samples_per_epoch`, `layers`, `seed`, ..., `token`, `tls`),
    except those the module sets (rank, world_size, epoch, cursor, dataset_version, split);
    `eval_args` override them for val and test.
    """

    def __init__(self, address: Union[str, Sequence[str], Client], dataset: str, train: Optional[str] = "train",
                 val: Optional[str] = "val", test: Optional[str] = None,
                 eval_args: Optional[Mapping[str, Any]] = None, **loader_args: Any) -> None:
        super().__init__()
        for k in _OWN:
            if k in loader_args or k in (eval_args or {}):
                raise TypeError(f"{k} is set by CogfeedDataModule (trainer, checkpoint or stage)")
        self.address, self.dataset = address, dataset
        self.splits = {"train": train, "val": val, "test": test}
        self.loader_args, self.eval_args = dict(loader_args), dict(eval_args or {})
        self._rank, self._world = 0, 1
        self._streams: Dict[str, _StageStream] = {}
        # The resume point: the last training batch given to the model (or a loaded state).
        self._state: Dict[str, Union[int, str]] = {}

    def setup(self, stage: Optional[str] = None) -> None:
        trainer = self.trainer
        if trainer is not None:
            self._rank, self._world = int(trainer.global_rank), int(trainer.world_size)

    def _epoch(self) -> int:
        return int(self.trainer.current_epoch) if self.trainer is not None else 0

    def _loader(self, stage: str) -> Any:
        split = self.splits[stage]
        if split is None:
            return []
        args = dict(self.loader_args)
        if stage != "train":
            args.update(self.eval_args)
        epoch_of = self._epoch if stage == "train" else None
        stream = _StageStream(self.address, self.dataset, self._rank, self._world, epoch_of, split=split, **args)
        if stage == "train":
            if self._state:
                stream.load_state_dict(self._state)
            else:
                stream.set_epoch(self._epoch())
        self._streams[stage] = stream
        return _Loader(stream, batch_size=None, num_workers=0)

    def train_dataloader(self) -> Any:
        return self._loader("train")

    def val_dataloader(self) -> Any:
        return self._loader("val")

    def test_dataloader(self) -> Any:
        return self._loader("test")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        trainer = self.trainer
        if trainer is not None and trainer.training and isinstance(batch, dict) and "cursor" in batch:
            stream = self._streams.get("train")
            self._state = {"epoch": int(batch["epoch"]), "cursor": int(batch["cursor"]),
                           "dataset_version": stream.dataset_version if stream is not None else ""}
        model = trainer.lightning_module if trainer is not None else None
        own = getattr(type(model), "on_before_batch_transfer", None) if model is not None else None
        if own is not None and own is not pl.LightningModule.on_before_batch_transfer:
            return own(model, batch, dataloader_idx)
        return batch

    def state_dict(self) -> Dict[str, Any]:
        """Epoch, cursor and dataset version of the last training batch given to the model."""
        return dict(self._state)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Resume the train stream there (Lightning calls this before making the dataloaders)."""
        self._state = dict(state_dict)
        stream = self._streams.get("train")
        if stream is not None and self._state:
            stream.load_state_dict(self._state)


__all__ = ("CogfeedDataModule",)
