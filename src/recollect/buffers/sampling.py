"""Reading a :class:`~recollect.ReplayBuffer`: its :class:`BufferReader` (``buf.reader``),
the buffer's :class:`~recollect.buffers.source.SampleSource`: ``sample`` (draw then gather),
``gather`` of a table draw, ``draw`` (draw now under the table lock, gather later outside it),
``stream`` (prefetch threads), and every stored step (``gather_all``, ``gather_row``,
``item_ids``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from recollect.buffers.buffer_part import BufferPart
from recollect.buffers.prefetcher import draw_waiting
from recollect.buffers.sample import Sample
from recollect.buffers.source_reads import stream_local
from recollect.buffers.stored_reads import StoredReader
from recollect.samplers.base import Sampler
from recollect.specs import FlatSpec
from recollect.storage.base import Storage
from recollect.table import Draw, Table

__all__ = ["BufferReader"]


class BufferReader(BufferPart):
    """The reads of a :class:`~recollect.ReplayBuffer` over its table and storage
    (``buf.reader``): a :class:`~recollect.buffers.source.SampleSource` that the adapters
    (``recollect.torch``, ``recollect.tf_data``, ``recollect.jax``), the manager and the
    drop-in modules read through.

    A draw is made under the table lock and gathered outside it (numpy releases the
    GIL), so readers on several threads gather at once.

    Args:
        flat: the buffer's flattened spec.
        table: the buffer's table (window index, sampler, RNG, lock).
        storage: the buffer's storage.
    """

    #: samples are made in this process (a served table's handle says True)
    remote = False
    #: the checkpoint kind of the buffer read (``Saved.kind``, the manifest's ``kind``)
    kind = "ReplayBuffer"

    def __init__(self, flat: FlatSpec, table: Table, storage: Storage) -> None:
        super().__init__(flat, table, storage)
        self._stored = StoredReader(flat, table, storage)

    @property
    def table(self) -> Table:
        """The :class:`~recollect.table.Table`: window index, sampler, RNG and lock."""
        return self._table

    @property
    def storage(self) -> Storage:
        """The :class:`~recollect.storage.base.Storage` holding the stored bytes."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler deciding which windows come back."""
        return self._table.sampler

    @property
    def rng(self) -> np.random.Generator:
        """The generator all sampling draws from."""
        return self._table.rng

    @property
    def sequence_length(self) -> int | None:
        """The fixed window length, or None."""
        return self._table.sequence_length

    @property
    def closed(self) -> bool:
        """Whether the buffer was closed: readers' iterations then end."""
        return self._table.closed

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

    def time_steps(self, num_steps: int | None) -> int | None:
        """``num_steps``, or for None the fixed ``sequence_length`` when it is > 1.

        Raises:
            InvalidArgumentError: ``num_steps`` > ``max_length`` (or < 1).
        """
        table = self._table
        table.resolve_window(num_steps)
        if num_steps is not None:
            return num_steps
        fixed = table.sequence_length
        return fixed if fixed is not None and fixed > 1 else None

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Sample]:
        """Draws the windows now, under the table lock; ``finish()`` gathers them.

        ``draw(b, n)()`` equals ``sample(b, n)``: same result distribution,
        shapes and errors. Draws made one after another consume the rng in
        that order wherever ``finish`` then runs; ``finish`` gathers outside
        the lock and, when ``table.is_stale(draw)`` says a write overwrote a
        drawn step meanwhile, samples again with the lock held (no retry
        loop). On a prefetch thread a rate-limited draw waits in slices and
        ends with StateError when the prefetcher is closed.
        """
        table = self._table
        drawn: Draw = draw_waiting(table, batch_size, num_steps)

        def finish() -> Sample:
            sample = self.gather(drawn)
            if table.is_stale(drawn):
                sample = self.sample(batch_size, num_steps)
            return sample

        return finish

    #: ``num_threads`` prefetch threads keeping ``prefetch`` batches ``convert(sample)`` ready
    #: (:func:`~recollect.buffers.source_reads.stream_local`)
    stream = stream_local

    def gather_all(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps (rows
                written with ``add_batch(..., rows=...)``); use ``gather_row``.
        """
        return self._stored.gather_stored()

    def gather_row(self, row: int) -> Any:
        """All stored steps of env row ``row``: leaves ``[steps, *shape]``, oldest first."""
        return self._stored.gather_row(row)

    def item_ids(self) -> np.ndarray:
        """Ids of all stored steps, int64 ``[num_envs, steps_per_row]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps.
        """
        return self._stored.item_ids()

    def steps_per_row(self) -> np.ndarray:
        """int64 ``[num_envs]``: steps currently stored in each row."""
        with self._table.lock:
            return self._table.index.stored.copy()
