"""Epoch and cursor of an iterable over one epoch, shared by `Loader` and `StreamDataset`.

A pass starts at `cursor` and moves it to the cursor of each batch delivered, so
`state_dict()` taken mid-pass resumes after the last delivered batch. When a pass ends the
cursor stays at the end (the state says the epoch is done); iterating again replays the
pass from where it started (`_origin`), and `len()` counts from there too.
"""

from typing import Dict, Mapping


class EpochCursor:
    """`epoch`, `cursor`, `state_dict()`, `load_state_dict()`, `set_epoch()` and `len()`.

    A subclass implements `_count(cursor)` (batches from that cursor to the end of the pass)
    and brackets each pass with `_begin()` (returns the cursor to start from) and `_end()`.
    """

    def __init__(self, epoch: int = 0, cursor: int = 0) -> None:
        self.epoch = int(epoch)
        self.cursor = int(cursor)
        # Where the current pass started from (len() counts from here).
        self._origin = self.cursor
        self._finished = False

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.cursor = self._origin = int(state["cursor"])
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
