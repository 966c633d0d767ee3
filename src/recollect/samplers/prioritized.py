"""Prioritized experience replay (Schaul et al. 2016, proportional variant).

Every valid window of the buffer's fixed ``sequence_length`` has a priority
``p_i``; windows are drawn (with replacement) with probability::

    P(i) = (p_i + epsilon)^alpha / sum_j (p_j + epsilon)^alpha

``alpha = 0`` is uniform sampling, ``alpha = 1`` fully proportional. Each
sample carries importance weights ``w_i = (N * P(i))^-beta`` (``N`` = number
of valid windows), normalised by default by the largest weight any stored
window can get, ``(N * P_min)^-beta`` (``weight_normalization="buffer"``: cpprb,
OpenAI baselines, TorchRL, Tianshou), or by their max over the batch
(``"batch"``: Dopamine, Reverb-based Acme agents): ``beta = 0`` gives weights
1 (no correction), ``beta = 1`` fully corrects the bias. ``P_min`` comes from
the smallest positive leaf the :class:`SumTree` keeps beside its sums.

The sampler is composed of one module per responsibility: which windows hold
a value, as the table writes (a :class:`~recollect.samplers.window_values.WindowValues`
the sampler holds from ``bind`` on), the checkpoint state
(:mod:`~recollect.samplers.prioritized_state`) and the argument checks
(:mod:`~recollect.samplers.priority_checks`); this module draws windows and updates
their priorities.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recollect.arguments import no_options
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.ids import MAX_TIME, ROW_BITS, ROW_SHIFT, SHARD_SHIFT
from recollect.samplers import prioritized_state
from recollect.samplers.base import Sampler, WindowDraw, importance_weights
from recollect.samplers.priority_checks import check_exponent, check_sum_finite, check_update
from recollect.samplers.sum_tree import SumTree
from recollect.samplers.window_values import WindowValues
from recollect.samplers.windows import WindowIndex

__all__ = ["Prioritized", "check_update"]


class Prioritized(Sampler):
    """Proportional prioritized sampling over windows of a fixed length.

    Args:
        priority_exponent: ``alpha`` >= 0.
        epsilon: added to every priority before the exponent (>= 0) so that
            windows of priority 0 can still be drawn.
        importance_sampling_exponent: default ``beta`` >= 0 when ``sample`` is
            called without one (anneal it with :class:`LinearSchedule`).
        initial_max_priority: priority of new windows until an update raises
            the running max (> 0).
        weight_normalization: ``"buffer"`` (default) divides importance weights by
            ``(N * P_min)^-beta``, the largest weight any stored window can get
            (cpprb, OpenAI baselines, TorchRL, Tianshou): a batch's weights do not
            depend on which windows it happened to draw. ``"batch"`` divides by
            the batch's largest weight (Dopamine; Acme agents on Reverb).

    Raises:
        InvalidArgumentError: an argument out of range; at ``bind``, a buffer
            without ``sequence_length``.

    Example:
        >>> buf = ReplayBuffer(spec, 1000, sampler=Prioritized(0.6), sequence_length=2, rng=0)
        >>> s = buf.sample(32, importance_sampling_exponent=0.4)
        >>> buf.update_priorities(s.ids, np.abs(td_errors))
    """

    def __init__(
        self,
        priority_exponent: float = 0.6,
        epsilon: float = 1e-6,
        *,
        importance_sampling_exponent: float = 0.4,
        initial_max_priority: float = 1.0,
        weight_normalization: str = "buffer",
    ) -> None:
        if weight_normalization not in ("buffer", "batch"):
            raise InvalidArgumentError(
                f'`weight_normalization` must be "buffer" (divide by (N * P_min)^-beta, as '
                f'cpprb) or "batch" (divide by the batch\'s largest weight, as Dopamine); got '
                f"{weight_normalization!r}."
            )
        self.weight_normalization = weight_normalization
        self.priority_exponent = check_exponent("priority_exponent", priority_exponent)
        self.epsilon = check_exponent("epsilon", epsilon)
        self.importance_sampling_exponent = check_exponent(
            "importance_sampling_exponent", importance_sampling_exponent
        )
        self.initial_max_priority = float(initial_max_priority)
        self.max_priority = self.initial_max_priority
        if not np.isfinite(self.max_priority) or self.max_priority <= 0:
            raise InvalidArgumentError(
                f"`initial_max_priority` must be a finite float > 0; got {initial_max_priority!r}."
            )
        # the last draw (keys, the bytes of its shard-0 ids, index generation) until a write,
        # removal or clear: an update of exactly its ids needs no validity checks
        self._drawn: tuple[np.ndarray, bytes, int] | None = None
        # their leaves' values and nodes (SumTree.search), until the first update of them
        self._drawn_values: tuple[np.ndarray, list[np.ndarray] | None] | None = None

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able) that rebuild this sampler, state excluded."""
        return {
            "priority_exponent": self.priority_exponent,
            "epsilon": self.epsilon,
            "importance_sampling_exponent": self.importance_sampling_exponent,
            "initial_max_priority": self.initial_max_priority,
            "weight_normalization": self.weight_normalization,
        }

    # -- memory -------------------------------------------------------------
    def estimate_nbytes(self, num_envs: int, max_length: int) -> int:
        size = num_envs * max_length
        raw = size if self.priority_exponent == 0 else 0
        tree = SumTree.estimate_nbytes(size, track_min=self.weight_normalization == "buffer")
        return tree + size + 8 * (raw + 3 * num_envs)

    @property
    def nbytes(self) -> int:
        values = getattr(self, "_values", None)
        return 0 if values is None else values.nbytes

    @property
    def num_valid(self) -> int:
        """The number of valid windows (each with a sampling value; 0 before ``bind``)."""
        values = getattr(self, "_values", None)
        return 0 if values is None else values.num_valid

    # -- table hooks ------------------------------------------------------
    def bind(
        self, index: WindowIndex, sequence_length: int | None, *, episode_aware: bool = False
    ) -> None:
        if sequence_length is None:
            raise InvalidArgumentError(
                "Prioritized sampling scores windows of a fixed length; construct the buffer "
                "with sequence_length=... (1 for single steps, 2 for transitions, n + 1 for "
                "n-step windows)."
            )
        super().bind(index, sequence_length, episode_aware=episode_aware)
        self._length = index.max_length
        # buffer-wide weights need P_min: the tree keeps its smallest positive leaf
        self._tree = SumTree(
            index.num_envs * index.max_length, track_min=self.weight_normalization == "buffer"
        )
        # which windows hold a value; raw priorities are kept only when alpha == 0 (else
        # recovered from the tree values)
        self._values = WindowValues(
            index, sequence_length, self._tree, keep_raw=self.priority_exponent == 0
        )
        self._priority = self._values.priority

    # -- table hooks: the window values follow the writes --------------------
    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        """Zeroes the windows whose first step was just overwritten; scores the new windows
        (:meth:`WindowValues.add <recollect.samplers.window_values.WindowValues.add>`)."""
        self._drawn = None
        value = (self.max_priority + self.epsilon) ** self.priority_exponent  # finite: checked
        self._values.add(rows, is_last, self.max_priority, value)

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        """:meth:`on_add` of ``count`` steps per row, in one pass."""
        self._drawn = None
        value = (self.max_priority + self.epsilon) ** self.priority_exponent
        self._values.add_block(rows, count, is_last, self.max_priority, value)

    def on_end_episodes(self, rows: np.ndarray) -> None:
        """Windows of later writes to ``rows`` start after the newly ended episode."""
        self._values.end_episodes(rows)

    def on_remove(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Zeroes the removed windows (each keyed by its first step's slot)."""
        self._drawn = None
        self._values.remove(rows, times)

    def drop_before(self, times: np.ndarray) -> None:
        """Zeroes the windows of each row ``r`` that start before ``times[r]``."""
        self._drawn = None
        self._values.drop_before(np.asarray(times, np.int64))

    def on_clear(self) -> None:
        self._drawn = None
        self._values.clear()

    # -- checkpoints ----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Leaf values, validity and scalars (plain numpy arrays and floats, no pickle;
        see :mod:`~recollect.samplers.prioritized_state`)."""
        scalars = prioritized_state.Scalars(self.max_priority, self.priority_exponent, self.epsilon)
        return prioritized_state.save_state(self._values, scalars, self.episode_aware)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (the buffer must have the same shape).

        The window index must be restored first: start times are derived from its clocks.

        Raises:
            InvalidArgumentError: the state does not fit this sampler.
        """
        scalars = prioritized_state.load_state(self._values, state)
        self._drawn = None
        self.max_priority, self.priority_exponent, self.epsilon = scalars

    def min_sampling_value(self) -> float:
        """The smallest positive ``(p_i + epsilon)^alpha`` of a valid window (``inf`` when
        none; NaN with ``weight_normalization="batch"``, which keeps no minimum).
        ``P_min = min_sampling_value() / sampling_weight()[0]``."""
        return self._tree.min if self._tree.track_min else math.nan

    def _value(self, priorities: np.ndarray) -> np.ndarray:
        """``(p + epsilon) ** alpha`` of priorities whose largest passed ``check_sum_finite``."""
        values = np.add(priorities, self.epsilon)
        return np.power(values, self.priority_exponent, out=values)

    def sampling_weight(self, num_steps: int, within_episode: bool) -> tuple[float, int]:
        """``(sum of (p_i + epsilon)^alpha, number of valid windows)`` (see the base class)."""
        return float(self._tree.total), self._values.num_valid

    # -- sampling ---------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        importance_sampling_exponent: float | None = None,
        **kwargs: Any,
    ) -> WindowDraw:
        """Draws windows with ``P(i) ∝ (p_i + epsilon)^alpha`` and their importance weights.

        Raises:
            InvalidArgumentError: unknown option, ``within_episode=False`` on an
                episode-aware buffer, or a negative exponent. (``num_steps`` other
                than the fixed ``sequence_length`` is refused by the buffer.)
            NotEnoughDataError: every valid window has priority 0 (epsilon=0).
        """
        self._check_request(within_episode, kwargs)
        beta = self.importance_sampling_exponent
        if importance_sampling_exponent is not None:
            beta = check_exponent("importance_sampling_exponent", importance_sampling_exponent)
        total = self._tree.total
        if total <= 0:
            raise NotEnoughDataError(
                "every valid window has priority 0; update some priorities to values > 0 or "
                "use epsilon > 0."
            )
        # the doubles of rng.uniform(0, total) (0.0 + total * d), searched in place
        draws = rng.random(batch_size)
        keys, values, parents = self._tree.search(np.multiply(draws, total), draws, total)
        probabilities = values / total
        windows = self._values
        rows, times = windows.start_times(keys)
        if not self._tree.track_min:
            weights = importance_weights(probabilities, windows.num_valid, beta)
        else:  # (N P_i)^-beta / (N P_min)^-beta = (v_i / v_min)^-beta
            weights = np.divide(values, self._tree.min)
            np.power(weights, -beta, out=weights)
        priorities = self._priorities(keys, values)
        ids = (rows << ROW_SHIFT) | times  # shard 0's: the table's ids, and the draw's key
        self._drawn = (keys, ids.tobytes(), self.index.generation)  # bytes: never mutated
        self._drawn_values = (values, parents)
        return WindowDraw(rows, times, probabilities, weights, windows.num_valid, priorities, ids)

    def _priorities(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Raw priorities of ``keys``: ``values ** (1 / alpha) - epsilon`` (exact to rounding)."""
        if len(self._priority):
            return self._priority[keys]
        raw = np.power(values, 1.0 / self.priority_exponent)
        raw -= self.epsilon
        return np.maximum(raw, 0.0, out=raw)

    def _check_request(self, within_episode: bool, kwargs: dict) -> None:
        if kwargs:
            no_options("Prioritized sampling", kwargs, takes="importance_sampling_exponent")
        if within_episode != self.episode_aware:
            raise InvalidArgumentError(
                f"Prioritized sampling decides window validity at write time (episode-aware="
                f"{self.episode_aware}); got within_episode={within_episode}. Leave "
                "within_episode=None."
            )

    # -- priorities -------------------------------------------------------
    def update_priorities(self, ids: Any, priorities: Any, shard: int = 0) -> int:
        """Sets the priorities of the windows whose first step has id ``ids``.

        Args:
            ids: int ``[K]`` window ids as returned by ``sample`` (``Sample.ids``).
            priorities: float ``[K]`` finite priorities >= 0 (e.g. ``|TD error|``).
                With repeated ids the last one wins.
            shard: the table shard this sampler serves; ids of other shards are skipped.

        Returns:
            Number of ids skipped because their window is no longer (or never
            was) valid: overwritten, cleared, crossing an episode end, or of
            another shard.

        Raises:
            InvalidArgumentError: shapes differ, ids are not integers, an id of
                this shard was never issued (its row or time was never written), a
                priority is NaN, inf or negative, or ``(p + epsilon) ** alpha``
                or the sum of all priorities overflows; nothing is changed.
        """
        ids, priorities, largest = self._check_update(ids, priorities)
        if not len(ids):
            return 0
        keys = self._drawn_keys(ids, shard)
        skipped = 0
        # the drawn leaves' values and nodes, still theirs until this first update of them
        found, self._drawn_values = self._drawn_values, None
        if keys is None:
            found = None
            keys, live = self._live_keys(ids, shard)
            skipped = len(ids) - int(np.count_nonzero(live))
            if skipped:
                self._refuse_unissued(ids, shard)
                keys, priorities = keys[live], priorities[live]
                largest = float(priorities.max()) if len(keys) else -1.0
        if len(keys):
            check_sum_finite(
                self._tree, keys, priorities, largest, self.epsilon, self.priority_exponent
            )
            values = self._value(priorities)
            if len(self._priority):  # before _set: a heap reads the raw priorities there
                self._priority[keys] = priorities
            self._values.set(keys, values, *(found or ()))
            self.max_priority = max(self.max_priority, largest)
        return skipped

    def _drawn_keys(self, ids: np.ndarray, shard: int) -> np.ndarray | None:
        """The keys of ``ids`` when they are exactly the ids of the last draw and no write,
        removal or clear came since (every drawn window is valid: it had a value > 0), else
        None. The common PER step (sample, learn, update) skips the decoding and checks."""
        drawn = self._drawn
        if drawn is None or len(drawn[0]) != len(ids) or drawn[2] != self.index.generation:
            return None
        keys, expected, _ = drawn
        if shard:  # the draw's ids have no shard bits: ids ^ shard bits == them iff ids
            ids = ids ^ shard << SHARD_SHIFT  # == them | shard bits
        # int64 ids against the draw's bytes: a memcmp (~1 us less than == and all)
        return keys if ids.tobytes() == expected else None

    def _live_keys(self, ids: np.ndarray, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, live)`` of ``ids``: each id's slot key and whether it names the valid
        window stored there (not overwritten, cleared, removed, or of another shard)."""
        # ids of this shard's rows: id >> 40 == shard << 15 | row (negative ids never match)
        rows = (ids >> ROW_SHIFT) - (shard << ROW_BITS)
        times = ids & (MAX_TIME - 1)
        live = (rows >= 0) & (rows < self.index.num_envs)
        keys = rows * self._length + times % self._length
        if not live.all():
            keys[~live] = 0
        # the id's window is the valid one of its slot: its time is still stored
        newest = self.index.t[np.where(live, rows, 0)]
        live &= self._values.valid[keys] & (times < newest) & (times >= newest - self._length)
        return keys, live

    def _refuse_unissued(self, ids: np.ndarray, shard: int) -> None:
        """Raises when an id of this shard names a row it lacks or a time its row has not
        reached: this buffer never issued it (stale ids, overwritten since, are skipped)."""
        rows = (ids >> ROW_SHIFT) - (shard << ROW_BITS)
        mine = (rows >= 0) & (rows < (1 << ROW_BITS))  # this shard's field; others skipped
        known = mine & (rows < self.index.num_envs)
        clocks = self.index.t[np.where(known, rows, 0)]
        bad = mine & (~known | ((ids & (MAX_TIME - 1)) >= clocks))
        if bad.any():
            named = ids[bad]
            raise InvalidArgumentError(
                f"update_priorities: ids {named[:5].tolist()}{' ...' if len(named) > 5 else ''} "
                f"({len(named)} of {len(ids)}) were never issued by this buffer (their row or "
                "step time was never written). Pass the ids of this buffer's samples "
                "(Sample.ids); nothing was updated."
            )

    def _check_update(self, ids: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray, float]:
        return check_update(ids, priorities)
