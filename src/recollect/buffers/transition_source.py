"""A :class:`~recollect.TransitionBuffer` as a :class:`~recollect.source.SampleSource` of
transition batches, for readers that take a ``Sample`` (``recollect.tf_data.as_dataset``).

A sample's ``data`` is the dict ``{"observation", "action", "reward",
"next_observation", "terminated", "truncated"}``, named as ``TransitionBuffer.sample``
names them, every leaf ``[batch_size, ...]``; there is no time axis (``num_steps`` must
be None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from recollect.buffers.prefetcher import Prefetcher, prefetched
from recollect.buffers.sample import Sample
from recollect.errors import InvalidArgumentError
from recollect.specs import ArraySpec, FlatSpec

if TYPE_CHECKING:
    from recollect.buffers.transition_buffer import TransitionBuffer
    from recollect.table import Table

__all__ = ["TransitionSource"]

#: The fields of a transition batch, in ``TransitionBuffer.sample``'s names.
FIELDS = ("observation", "action", "reward", "next_observation", "terminated", "truncated")


class TransitionSource:
    """Samples a :class:`~recollect.TransitionBuffer` as :class:`~recollect.Sample` batches.

    Args:
        buffer: the TransitionBuffer; it must hold a transition (its spec is
            inferred from the first ``add``).

    Raises:
        NotEnoughDataError: ``buffer`` was never added to.
    """

    remote = False

    def __init__(self, buffer: TransitionBuffer) -> None:
        self.buffer = buffer
        spec = buffer.replay_buffer.data_spec  # raises NotEnoughDataError before the first add
        self._spec = {
            "observation": spec["observation"],
            "action": spec["action"],
            "reward": spec["reward"],
            "next_observation": spec["observation"],
            "terminated": ArraySpec((), np.bool_),
            "truncated": ArraySpec((), np.bool_),
        }
        self._flat = FlatSpec(self._spec)

    @property
    def data_spec(self) -> Any:
        """The spec of one transition: a dict of the six fields (module docstring)."""
        return self._spec

    @property
    def flat_spec(self) -> FlatSpec:
        return self._flat

    @property
    def table(self) -> Table:
        """The inner buffer's table: readers watch its generation to see writes."""
        return self.buffer.replay_buffer.table

    @property
    def closed(self) -> bool:
        """False: a TransitionBuffer is never closed."""
        return False

    def time_steps(self, num_steps: int | None) -> int | None:
        """None: transitions have no time axis.

        Raises:
            InvalidArgumentError: ``num_steps`` is not None.
        """
        if num_steps is not None:
            raise InvalidArgumentError(
                f"a TransitionBuffer samples single transitions: num_steps must be None; got "
                f"num_steps={num_steps}. Use sample(batch_size, n_step=..., discount=...) for "
                "n-step returns, or a recollect.ReplayBuffer for windows of steps."
            )
        return None

    def sample(self, batch_size: int, num_steps: int | None = None) -> Sample:
        """``batch_size`` transitions drawn as ``TransitionBuffer.sample`` draws them.

        Raises:
            InvalidArgumentError: ``num_steps`` is not None or ``batch_size`` < 1.
            NotEnoughDataError: the buffer is empty.
        """
        self.time_steps(num_steps)
        s = self.buffer.sample(batch_size)
        return Sample(
            {name: getattr(s, name) for name in FIELDS},
            s.ids,
            s.probabilities,
            weights=s.weights,
            table_size=len(self.buffer),
        )

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Sample]:
        """Samples now; returns ``finish()``, which returns the sample."""
        s = self.sample(batch_size, num_steps)
        return lambda: s

    def stream(
        self,
        batch_size: int,
        num_steps: int | None,
        *,
        convert: Callable[[Any], Any] | None = None,
        prefetch: int = 2,
        num_threads: int = 1,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> Prefetcher:
        """Prefetch threads keeping ``prefetch`` batches ``convert(sample)`` ready (as
        :meth:`recollect.buffers.source_reads.LocalSource.stream`)."""
        del max_in_flight, batches_per_request  # a local buffer sends no requests
        return prefetched(
            self,
            batch_size,
            num_steps,
            convert=convert,
            prefetch=prefetch,
            num_threads=num_threads,
        )
