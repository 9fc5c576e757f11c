"""Epoch and cursor of an iterable over one epoch, shared by `Loader` and `StreamDataset`.

A pass starts at `cursor` and moves it to the cursor of each batch delivered, so
`state_dict()` taken mid-pass resumes after the last delivered batch, and carries the
dataset version the cursor was taken on: a resume on a changed dataset is refused
(`FailedPrecondition`) rather than silently repeating or skipping samples. When a pass ends the
cursor stays at the end (the state says the epoch is done); iterating again replays the
pass from where it started (`_origin`), and `len()` counts from there too.
"""

from typing import Dict, Mapping, Union


class EpochCursor:
    """`epoch`, `cursor`, `state_dict()`, `load_state_dict()`, `set_epoch()` and `len()`.

    A subclass implements `_count(cursor)` (batches from that cursor to the end of the pass)
    and brackets each pass with `_begin()` (returns the cursor to start from) and `_end()`.
    """

    def __init__(self, epoch: int = 0, cursor: int = 0, dataset_version: str = "") -> None:
        self.epoch = int(epoch)
        self.cursor = int(cursor)
        #: The dataset version the cursor was taken on (from the batches); a resume sends
        #: it, and the daemon refuses it if the dataset has changed since.
        self.dataset_version = str(dataset_version)
        # Where the current pass started from (len() counts from here).
        self._origin = self.cursor
        self._finished = False

    def state_dict(self) -> Dict[str, Union[int, str]]:
        return {"epoch": self.epoch, "cursor": self.cursor, "dataset_version": self.dataset_version}

    def load_state_dict(self, state: Mapping[str, Union[int, str]]) -> None:
        self.epoch = int(state["epoch"])
        self.cursor = self._origin = int(state["cursor"])
        # States saved before versions were kept resume unchecked.
        self.dataset_version = str(state.get("dataset_version", ""))
        self._finished = False

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its beginning."""
        self.epoch = int(epoch)
        self.cursor = self._origin = 0
        self._finished = False

    def __len__(self) -> int:
        return self._count(self._origin)

    def _count(self, cursor: int) -> int:
        raise NotImplementedError

    def _begin(self) -> int:
        """The cursor a pass starts from: after a finished pass, where that one started."""
        if self._finished:
            self.cursor, self._finished = self._origin, False
        return self.cursor

    def _end(self) -> None:
        self._finished = True
