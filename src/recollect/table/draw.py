"""What a table's draw returns: which windows, with what probability, at which generation."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Draw"]


@dataclasses.dataclass(slots=True)
class Draw:
    """Windows drawn from a :class:`~recollect.table.Table`, not yet gathered.

    The draw happens under the table lock; the gather of the data may run
    outside it, and :meth:`Table.is_stale` then tells whether a write
    overwrote a drawn step meanwhile (Reverb's sample-info fields, plus what
    the check needs).

    Attributes:
        rows: int64 ``[B]`` env row of each window.
        times: int64 ``[B]`` row step time of each window's first step.
        ids: int64 ``[B]`` id of each window's first step (see :mod:`recollect.ids`).
        probabilities: float64 ``[B]`` probability with which each window was drawn.
        table_size: number of windows the draw chose among.
        priorities: float64 ``[B]`` priority of each window (1.0 without priorities).
        times_sampled: int32 ``[B]`` times each window was returned, this draw included
            (tables with ``track_times_sampled``), else None.
        weights: float64 ``[B]`` importance weights (prioritized samplers), else None.
        num_steps: steps per window.
        time_axis: whether gathered leaves keep a ``num_steps`` axis.
        generation: the table's write generation at the draw.
    """

    rows: np.ndarray
    times: np.ndarray
    ids: np.ndarray
    probabilities: np.ndarray
    table_size: int
    priorities: np.ndarray
    times_sampled: np.ndarray | None
    weights: np.ndarray | None
    num_steps: int
    time_axis: bool
    generation: int

    def __len__(self) -> int:
        return len(self.rows)

    def steps(self, max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, slots, times)`` of every drawn step: ``[B, num_steps]`` (rows ``[B, 1]``,
        broadcast), or ``[B]`` without a time axis, for :meth:`Storage.gather`."""
        if self.time_axis:
            times = self.times[:, None] + np.arange(self.num_steps)
            return self.rows[:, None], times % max_length, times  # rows broadcast
        return self.rows, self.times % max_length, self.times
