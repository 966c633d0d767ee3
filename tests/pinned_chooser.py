"""A thread chooser pinned to one mode, for codec tests whose results must not depend on it."""

from __future__ import annotations


class Pinned:
    """Answers ``split()`` with one mode and ignores the timings it is given (the
    :class:`~recollect.storage.gather.ThreadChooser` interface)."""

    def __init__(self, split: bool) -> None:
        self.mode = split

    def split(self, nbytes: int) -> bool:
        return self.mode

    def record(self, nbytes: int, split: bool, seconds: float) -> None:
        pass
