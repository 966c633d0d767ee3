"""Heap selectors (Reverb's ``MinHeap`` / ``MaxHeap``): the lowest or highest priority first.

Deterministic: a draw of ``batch_size`` returns the windows of lowest
(:class:`MinHeap`) or highest (:class:`MaxHeap`) priority in that order, ties
broken by age (older start time first, then lower row). When fewer windows
are valid, the valid ones repeat cyclically in the same order (as
:class:`~recollect.Fifo`). Paired with ``max_times_sampled=1`` each window
comes back once, best first. Probabilities are 1.0; no ``rng`` draw is made.

Priorities are set with ``update_priorities`` as for
:class:`~recollect.Prioritized`; a new window gets ``initial_priority``.
Windows are of the buffer's fixed ``sequence_length``.

Cost: O(valid windows) per draw (a partition of the priorities), plus
O(k log k) to order the ``k`` chosen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.samplers.base import WindowDraw
from recollect.samplers.prioritized import Prioritized

__all__ = ["MaxHeap", "MinHeap"]


class _Heap(Prioritized):
    """Shared machinery: Prioritized's validity bookkeeping with raw priorities kept."""

    _sign = 1.0  # MinHeap orders by priority, MaxHeap by -priority

    def __init__(self, initial_priority: float = 1.0) -> None:
        initial = float(initial_priority)
        if not np.isfinite(initial) or initial < 0:
            raise InvalidArgumentError(
                f"`initial_priority` must be a finite float >= 0; got {initial_priority!r}."
            )
        # alpha = 0: the sum tree holds ones for valid windows and raw priorities are kept
        super().__init__(
            0.0, 0.0, initial_max_priority=max(initial, 1e-300), weight_normalization="batch"
        )
        self.initial_priority = initial

    def get_config(self) -> dict[str, float]:
        return {"initial_priority": self.initial_priority}

    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        self.max_priority = self.initial_priority
        super().on_add(rows, is_last)

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        self.max_priority = self.initial_priority
        super().on_add_block(rows, count, is_last)

    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> WindowDraw:
        if kwargs:
            raise InvalidArgumentError(
                f"{type(self).__name__} sampling takes no options; got {sorted(kwargs)}."
            )
        self._check_request(within_episode, {})
        keys = np.flatnonzero(self._valid)
        if not len(keys):
            raise NotEnoughDataError(
                f"{type(self).__name__}: no valid window of sequence_length="
                f"{self.sequence_length} is stored; add more steps."
            )
        order_by = self._priority[keys] * self._sign
        k = min(batch_size, len(keys))
        if k < len(keys):
            threshold = np.partition(order_by, k - 1)[k - 1]
            chosen = order_by <= threshold
            keys, order_by = keys[chosen], order_by[chosen]
        rows, times = self._start_times(keys)
        order = np.lexsort((rows, times, order_by))[:k]
        if k < batch_size:
            order = order[np.arange(batch_size) % k]
        keys = keys[order]
        return WindowDraw(
            rows[order],
            times[order],
            np.ones(batch_size),
            table_size=self.num_valid,
            priorities=self._priority[keys],
        )


class MinHeap(_Heap):
    """The windows of lowest priority first (ties: oldest first); see the module doc.

    Args:
        initial_priority: priority of new windows (finite, >= 0).
    """


class MaxHeap(_Heap):
    """The windows of highest priority first (ties: oldest first); see the module doc.

    Args:
        initial_priority: priority of new windows (finite, >= 0).
    """

    _sign = -1.0
