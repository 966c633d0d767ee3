"""The storage interface: bytes in slots, nothing else.

A storage keeps ``num_envs`` rows of ``max_length`` slots, one step per slot.
It knows slots, not ids, clocks, windows or sampling: the table decides which
slot a step goes to (``time % max_length``) and which slots a sample reads.
Storages that need step times (the frame store rebuilds stacks from the frames
of earlier times) get them as arguments.

State follows the one protocol of every component (``state_dict()`` /
``load_state_dict()``): ``state_dict()["columns"]`` maps a stable name to each
ring array ``[num_envs, max_length, *shape]`` (checkpoints write only the
stored columns of those); every other array entry is written whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["ColumnSource", "Storage"]


@runtime_checkable
class ColumnSource(Protocol):
    """A saved ring array that :meth:`Storage.load_state_dict` reads straight into place."""

    def read_into(self, dest: np.ndarray) -> None:
        """Fills ``dest`` ``[num_envs, max_length, *shape]`` with the saved columns."""

    def map(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """The whole saved array mapped read-only/copy-on-write, or None when it cannot be."""


@runtime_checkable
class Storage(Protocol):
    """What a table's storage offers (RAM ring, memmap ring, frame store).

    ``rows`` None means every row (then ``slots``/``times`` are one scalar or
    one value per row); otherwise int64 ``[k]`` distinct rows with ``[k]``
    slots and times. Leaves are in :class:`~recollect.specs.FlatSpec` order.
    """

    num_envs: int
    max_length: int

    @property
    def nbytes(self) -> int:
        """Bytes this storage allocated."""

    def write(
        self,
        rows: np.ndarray | None,
        slots: Any,
        leaves: Sequence[np.ndarray],
        *,
        times: Any = None,
    ) -> None:
        """Writes one step to each row: leaves ``[k, *shape]`` (``[num_envs, ...]`` for all rows).

        ``times`` are the steps' row times (a scalar when every row shares one).
        Ring storages also take a block: ``slots`` ``[k, T]`` and leaves
        ``[k, T, *shape]`` (``ReplayBuffer.extend``).
        """

    def gather(
        self,
        rows: np.ndarray,
        slots: np.ndarray,
        *,
        times: np.ndarray | None = None,
        leaf_ids: Sequence[int] | None = None,
    ) -> list[np.ndarray]:
        """Leaves at ``(rows, slots)`` (broadcasting shapes): ``[*shape, *leaf_shape]`` each."""

    def state_dict(self) -> dict[str, Any]:
        """Arrays that restore the stored bytes (see the module doc for ``columns``)."""

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output; ``allow_map`` lets full column files be mapped."""

    def check_stored(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """After a restore: raises CheckpointError unless every step of row ``r`` at times
        ``[lo[r], hi[r])`` (int64 ``[num_envs]``) was written. Storages that keep a
        never-written mark (compressed values) check it; raw rings cannot tell."""
