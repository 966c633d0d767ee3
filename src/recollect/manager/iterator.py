"""SampleIterator: the endless iterator of samples that ``ReplayBufferManager.get_dataset``
returns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from recollect.buffers.sample import Sample

__all__ = ["SampleIterator"]


class _Owner(Protocol):
    """What the iterator reads of its :class:`~recollect.ReplayBufferManager`."""

    @property
    def closed(self) -> bool: ...

    @property
    def replay_buffer(self) -> Any: ...


class SampleIterator(Iterator[Sample]):
    """Endless iterator of :class:`~recollect.Sample` batches (stops when the manager closes)."""

    def __init__(
        self,
        manager: _Owner,
        batch_size: int,
        num_steps: int | None,
        options: dict[str, Any],
    ) -> None:
        self._manager = manager
        self._args = (batch_size, num_steps)
        self._options = options

    def __iter__(self) -> SampleIterator:
        return self

    def __next__(self) -> Sample:
        if self._manager.closed:
            raise StopIteration
        batch_size, num_steps = self._args
        sample: Sample = self._manager.replay_buffer.sample(batch_size, num_steps, **self._options)
        return sample
