"""Heap selectors (Reverb's ``MinHeap`` / ``MaxHeap``): the lowest or highest priority first.

Deterministic: ``sample(k)`` returns the ``k`` windows of lowest
(:class:`MinHeap`) or highest (:class:`MaxHeap`) priority in that order.
Ties are broken by update order, as in Reverb: of equal priorities the
window inserted or updated least recently comes first, the most recently
updated goes last. A table fills a batch as Reverb does, one selection per
item: the top window ``b`` times, unless ``max_times_sampled`` removes it
(``max_times_sampled=1``: each window comes back once, best first; see
:mod:`recollect.table.selection`). Probabilities are 1.0; no ``rng`` draw.

Priorities are set with ``update_priorities`` as for
:class:`~recollect.Prioritized`; a new window gets ``initial_priority``.
Windows are of the buffer's fixed ``sequence_length``.

Cost: a :class:`~recollect.samplers.heap_tree.TopTree` keyed by
``(signed priority, update counter)``: O(k B log N) per draw of ``k``
windows and O(K B log N) per update of ``K``, whatever the ties.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.arguments import no_options
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.samplers.base import WindowDraw
from recollect.samplers.heap_tree import TopTree
from recollect.samplers.prioritized import Prioritized
from recollect.samplers.windows import WindowIndex

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

    deterministic = True

    def estimate_nbytes(self, num_envs: int, max_length: int) -> int:
        size = num_envs * max_length
        return super().estimate_nbytes(num_envs, max_length) + TopTree.estimate_nbytes(size)

    @property
    def nbytes(self) -> int:
        top = getattr(self, "_top", None)
        return super().nbytes + (0 if top is None else top.nbytes)

    def bind(
        self, index: WindowIndex, sequence_length: int | None, *, episode_aware: bool = False
    ) -> None:
        super().bind(index, sequence_length, episode_aware=episode_aware)
        self._top = TopTree(index.num_envs * index.max_length)
        self._values.on_set = self._values_set  # the order follows every value set
        self._updates = 0  # the update counter: ties go in update order

    def _values_set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Keeps the heap keys of ``keys`` (valid windows: value 1) beside the validity tree."""
        keys = np.asarray(keys, np.int64)
        if len(np.unique(keys)) != len(keys):  # the last write of a key wins
            last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
            keys, values = keys[last], np.asarray(values)[last]
        live = np.asarray(values) > 0
        stamp = np.where(live, self._updates + np.arange(len(keys)), 0)
        self._updates += len(keys)
        primary = np.where(live, self._sign * self._priority[keys], np.inf)
        self._top.set(keys, primary, stamp)

    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        self.max_priority = self.initial_priority
        super().on_add(rows, is_last)

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        self.max_priority = self.initial_priority
        super().on_add_block(rows, count, is_last)

    def on_clear(self) -> None:
        super().on_clear()
        self._top.fill(np.full(self._top.capacity, np.inf), np.zeros(self._top.capacity, np.int64))

    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        importance_sampling_exponent: float | None = None,
        **kwargs: Any,
    ) -> WindowDraw:
        if importance_sampling_exponent is not None:  # no weights: an option as any other
            kwargs["importance_sampling_exponent"] = importance_sampling_exponent
        no_options(f"{type(self).__name__} sampling", kwargs)
        self._check_request(within_episode, {})
        num_valid = self._values.num_valid
        if not num_valid:
            raise NotEnoughDataError(
                f"{type(self).__name__}: no valid window of sequence_length="
                f"{self.sequence_length} is stored; add more steps."
            )
        k = min(batch_size, num_valid)
        keys = self._top.best(k)
        if k < batch_size:
            keys = keys[np.arange(batch_size) % k]
        rows, times = self._values.start_times(keys)
        return WindowDraw(
            rows,
            times,
            np.ones(batch_size),
            table_size=num_valid,
            priorities=self._priority[keys],
        )

    # -- checkpoints: the update order is state too ------------------------------
    def state_dict(self) -> dict[str, Any]:
        # the update order as ranks among valid windows (0 elsewhere): the same state
        # whatever counter values produced that order
        keys = np.flatnonzero(self._values.valid)
        rank = np.zeros(self._top.capacity, np.int64)
        rank[keys[np.argsort(self._top.stamp[keys], kind="stable")]] = np.arange(len(keys))
        return {**super().state_dict(), "stamp": rank}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        size = self._top.capacity
        stamp = state.get("stamp")
        if stamp is None:  # an older checkpoint: ties in age order (start time, then row)
            keys = np.flatnonzero(self._values.valid)
            rows, times = self._values.start_times(keys)
            stamp = np.zeros(size, np.int64)
            stamp[keys[np.lexsort((rows, times))]] = np.arange(len(keys))
        stamp = np.asarray(stamp, np.int64).reshape(size)
        primary = np.where(self._values.valid, self._sign * self._priority, np.inf)
        self._top.fill(primary, np.where(self._values.valid, stamp, 0))
        self._updates = int(stamp.max(initial=-1)) + 1


class MinHeap(_Heap):
    """The windows of lowest priority first (ties: least recently updated first); see the
    module doc.

    Args:
        initial_priority: priority of new windows (finite, >= 0).
    """


class MaxHeap(_Heap):
    """The windows of highest priority first (ties: least recently updated first); see the
    module doc.

    Args:
        initial_priority: priority of new windows (finite, >= 0).
    """

    _sign = -1.0
