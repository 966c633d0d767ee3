"""Sampling a :class:`~recollect.TransitionBuffer`: transitions, their next observations
(stored once, in the following step, or kept aside where the observation chain broke),
and n-step transitions (:mod:`recollect.buffers.nstep_transitions`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from recollect import ids as id_layout
from recollect.arguments import positive_int
from recollect.buffers.nstep_transitions import n_step_fields
from recollect.buffers.transition_sample import TransitionSample, n_step_args
from recollect.errors import InvalidArgumentError
from recollect.samplers.prioritized import Prioritized

if TYPE_CHECKING:
    from recollect.buffers.final_observations import FinalObservations
    from recollect.buffers.replay_buffer import ReplayBuffer
    from recollect.specs import FlatSpec

__all__ = ["TransitionReads"]


class TransitionReads:
    """The reading methods of :class:`~recollect.TransitionBuffer` (a mixin)."""

    _num_envs: int
    _obs_flat: FlatSpec
    _obs_leaf_ids: list[int]
    _other_leaf_ids: list[int]
    _pending: list[np.ndarray]
    _final_ref: np.ndarray
    _finals: FinalObservations

    @property
    def replay_buffer(self) -> ReplayBuffer:
        raise NotImplementedError

    def _clock(self) -> int:
        raise NotImplementedError

    def sample(
        self,
        batch_size: int,
        *,
        n_step: int | None = None,
        discount: float | None = None,
        importance_sampling_exponent: float | None = None,
    ) -> TransitionSample:
        """Draws ``batch_size`` transitions (with replacement): uniformly, or by priority.

        Args:
            batch_size: transitions to draw, >= 1.
            n_step: n-step transitions (needs ``discount``): ``reward`` is the
                discounted sum of up to ``n_step`` rewards, cut at the episode
                end (terminated, truncated or a broken observation chain) and
                at the newest stored transition; ``next_observation``,
                ``terminated`` and ``truncated`` are those of the last summed
                transition and ``discount`` is ``gamma^k`` for the ``k``
                rewards summed. See :mod:`recollect.buffers.nstep_transitions`.
            discount: ``gamma`` in ``[0, 1]``; alone it means ``n_step=1``.
            importance_sampling_exponent: ``beta`` of prioritized buffers
                (default: the sampler's).

        Returns:
            :class:`TransitionSample`, every field ``[batch_size, ...]``;
            ``weights`` when prioritized, ``discount`` when n-step.

        Raises:
            InvalidArgumentError: ``batch_size``/``n_step`` < 1, ``n_step``
                without ``discount``, a discount outside ``[0, 1]``, or
                ``importance_sampling_exponent`` on a uniform buffer.
            NotEnoughDataError: the buffer is empty.
        """
        batch_size = positive_int("batch_size", batch_size)
        n, gamma = n_step_args(n_step, discount)
        options = {}
        if importance_sampling_exponent is not None:
            if not isinstance(self.replay_buffer.sampler, Prioritized):
                raise InvalidArgumentError(
                    "importance_sampling_exponent needs a prioritized buffer; construct "
                    "TransitionBuffer(..., prioritized=True)."
                )
            options["importance_sampling_exponent"] = importance_sampling_exponent
        buffer = self.replay_buffer
        with buffer.lock:
            draw = buffer.table.draw(
                batch_size, 1, within_episode=False, time_axis=False, **options
            )
            return self._sample_at(draw.rows, draw.times, n, gamma, draw)

    def sample_at(
        self,
        rows: Any,
        times: Any,
        *,
        n_step: int | None = None,
        discount: float | None = None,
        importance_sampling_exponent: float | None = None,
    ) -> TransitionSample:
        """The transitions stored at step ``times`` of env ``rows`` (int ``[B]`` each), as
        :meth:`sample` returns them (``probabilities`` and ``weights`` of 1).

        For callers that choose the transitions themselves (SB3's ``_get_samples``).
        ``importance_sampling_exponent`` is accepted and ignored.

        Raises:
            InvalidArgumentError: rows or times of another shape, a row out of
                range, a step that is not stored, or bad ``n_step``/``discount``.
        """
        del importance_sampling_exponent
        n, gamma = n_step_args(n_step, discount)
        rows = np.asarray(rows, np.int64).reshape(-1)
        times = np.asarray(times, np.int64).reshape(-1)
        buffer = self.replay_buffer
        with buffer.lock:
            clock = self._clock()
            lo = max(int(buffer.table.cleared_before[0]), clock - buffer.max_length)
            bad = (rows < 0) | (rows >= self._num_envs) | (times < lo) | (times >= clock)
            if rows.shape != times.shape or bad.any():
                raise InvalidArgumentError(
                    f"sample_at needs stored steps: rows in [0, {self._num_envs}) and times in "
                    f"[{lo}, {clock}), of one shape; got rows {rows.tolist()[:8]}, times "
                    f"{times.tolist()[:8]}."
                )
            return self._sample_at(rows, times, n, gamma, None)

    def _sample_at(
        self, rows: np.ndarray, times: np.ndarray, n: int, gamma: float | None, draw: Any
    ) -> TransitionSample:
        """The sample at ``(rows, times)``; the caller holds the buffer lock."""
        buffer = self.replay_buffer
        if gamma is None:
            leaves, next_obs = self._gather_transitions(rows, times)
        else:
            slots = times % buffer.max_length
            leaves = buffer.storage.gather(rows, slots, times=times)
            fields = n_step_fields(self, rows, times, n, gamma)
            next_obs = fields.pop("next_observation")
        data = buffer.flat_spec.unflatten(leaves)
        if gamma is not None:
            data.update(fields)
        ones = np.ones(len(rows))
        return TransitionSample(
            observation=data["observation"],
            action=data["action"],
            reward=data["reward"],
            next_observation=self._obs_flat.unflatten(next_obs),
            terminated=data["terminated"],
            truncated=data["truncated"],
            ids=id_layout.encode(rows, times) if draw is None else draw.ids,
            probabilities=ones if draw is None else draw.probabilities,
            weights=None if draw is None else draw.weights,
            discount=data.get("discount"),
        )

    def _gather_transitions(
        self, rows: np.ndarray, times: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Step leaves of ``(rows, times)`` and their next observations.

        Observations and next observations are ONE gather of ``2 * B`` rows per
        observation leaf (large ones are split over threads), whose halves are
        the two contiguous results.
        """
        buffer = self.replay_buffer
        length, obs_ids, storage = buffer.max_length, self._obs_leaf_ids, buffer.storage
        both_rows = np.concatenate([rows, rows])
        both_times = np.concatenate([times, times + 1])
        both = storage.gather(both_rows, both_times % length, times=both_times, leaf_ids=obs_ids)
        other_ids = self._other_leaf_ids
        leaves: list[Any] = [None] * len(buffer.flat_spec.paths)
        others = storage.gather(rows, times % length, times=times, leaf_ids=other_ids)
        for i, leaf in zip(other_ids, others, strict=True):
            leaves[i] = leaf
        batch = len(rows)
        for i, leaf in zip(obs_ids, both, strict=True):
            leaves[i] = leaf[:batch]
        return leaves, self.next_observations(rows, times, [leaf[batch:] for leaf in both])

    def chain_breaks(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Bool, shape of ``rows``: whether the step at ``(rows, slots)`` keeps its own
        next observation (its episode or observation chain ends there)."""
        return self._final_ref[rows, slots] >= 0

    def next_observations(
        self, rows: np.ndarray, times: np.ndarray, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Next observation leaves of steps ``(rows, times)`` (``[B, ...]`` each).

        ``out``: the observations of the following steps, if already gathered.
        The caller holds the buffer lock.
        """
        buffer = self.replay_buffer
        length = buffer.max_length
        if out is None:
            following = times + 1
            out = buffer.storage.gather(
                rows, following % length, times=following, leaf_ids=self._obs_leaf_ids
            )
        refs = self._final_ref[rows, times % length]
        has_final = np.flatnonzero(refs >= 0)
        if len(has_final):
            for o, v in zip(out, self._finals.gather(refs[has_final]), strict=True):
                o[has_final] = v
        newest = np.flatnonzero((times == self._clock() - 1) & (refs < 0))
        if len(newest):
            for o, p in zip(out, self._pending, strict=True):
                o[newest] = p[rows[newest]]
        return out
