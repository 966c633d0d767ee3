"""Sampling a :class:`~recollect.ReplayBuffer`: ``sample`` (draw then gather), ``gather``
of a table draw, and the changes a learner makes to what it sampled (priority updates,
deletes) with the table's info report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recollect.buffers.sample import Sample

if TYPE_CHECKING:
    from recollect.specs import FlatSpec
    from recollect.storage.base import Storage
    from recollect.table import Draw, Table, TableInfo

__all__ = ["BufferSampling"]


class BufferSampling:
    """``sample``, ``gather``, ``update_priorities``, ``delete`` and ``info`` of
    :class:`~recollect.ReplayBuffer` (a mixin)."""

    _flat: FlatSpec
    _max_length: int
    _table: Table
    _storage: Storage
    _config: dict[str, Any]

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        *,
        within_episode: bool | None = None,
        timeout: float | None = None,
        **sampler_options: Any,
    ) -> Sample:
        """Draws ``batch_size`` windows of ``num_steps`` consecutive steps of one row.

        Args:
            batch_size: windows to draw (with replacement), >= 1.
            num_steps: window length; None gives one step per item and drops
                the time axis, or, when the buffer fixes ``sequence_length`` > 1,
                windows of that length with a time axis (as Reverb items).
            within_episode: override of episode-aware mode (default: on when
                the spec has ``is_last``).
            timeout: with a rate limiter, seconds to wait while it forbids the
                sample (None: forever, 0: never); ignored without one.
            **sampler_options: passed to the sampler (e.g. the prioritized
                sampler's ``importance_sampling_exponent``).

        Returns:
            :class:`Sample` with ``data`` leaves ``[batch_size, num_steps, *shape]``
            (``[batch_size, *shape]`` for ``num_steps=None``), ``ids`` int64,
            ``probabilities`` float64, ``priorities``, ``times_sampled``,
            ``table_size`` and (prioritized) ``weights`` float64.

        Raises:
            InvalidArgumentError: ``batch_size`` or ``num_steps`` < 1,
                ``num_steps`` > ``max_length``, or ``within_episode=True``
                without an ``is_last`` leaf.
            NotEnoughDataError: no valid window of that length is stored (no rate limiter).
            RateLimiterTimeout: the rate limiter still forbids it after ``timeout``.
            StateError: the buffer was closed while the sample waited.
        """
        with self._table.lock:
            draw = self._table.draw(
                batch_size,
                num_steps,
                within_episode=within_episode,
                timeout=timeout,
                **sampler_options,
            )
            return self.gather(draw)

    def gather(self, draw: Draw) -> Sample:
        """The :class:`Sample` of a :meth:`Table.draw <recollect.table.Table.draw>` of this
        buffer, gathered now.

        Without the lock held, a concurrent write may overwrite drawn steps
        meanwhile: check ``buf.table.is_stale(draw)`` afterwards and draw again
        when it is (the protocol the adapters use to gather outside the lock).
        """
        if draw.time_axis:
            rows, slots, times = draw.steps(self._max_length)
        else:
            rows, times = draw.rows, draw.times
            slots = times % self._max_length
        leaves = self._storage.gather(rows, slots, times=times)
        return Sample(
            self._flat.unflatten(leaves),
            draw.ids,
            draw.probabilities,
            draw.weights,
            draw.priorities,
            draw.times_sampled,
            draw.table_size,
        )

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets the priorities of the windows starting at ``ids`` (prioritized samplers).

        Returns:
            The number of ids skipped because their steps were overwritten.

        Raises:
            InvalidArgumentError: the sampler does not use priorities, or bad
                priorities (NaN, inf, negative, overflowing); nothing is changed.
        """
        return self._table.update_priorities(ids, priorities)

    def delete(self, ids: Any) -> int:
        """Deletes the windows starting at ``ids`` (Reverb: ``mutate_priorities`` deletes).

        A deleted window is never sampled again; ``info().size`` drops and
        ``info().deletes`` counts it; a rate limiter sees the smaller size (a
        delete can let an insert through and block a sample, as in Reverb). The
        steps stay stored (windows starting elsewhere may still contain them).

        Args:
            ids: int ``[K]`` window ids (``Sample.ids``, ``item_ids()``).

        Returns:
            The number of ids skipped, as :meth:`update_priorities` counts them:
            overwritten, not (yet) a complete window, of another shard, or
            deleted already.

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
        return self._table.delete(ids)

    def info(self) -> TableInfo:
        """Size, counters, rate limiter and sampler of the buffer's table (:class:`TableInfo`)."""
        return self._table.info(self._config["sampler"]["config"])
