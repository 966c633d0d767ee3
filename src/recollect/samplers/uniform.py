"""Uniform sampling over every valid window (Reverb: ``Uniform`` selector)."""

from __future__ import annotations

import numpy as np

from recollect.samplers.base import Sampler, WindowDraw
from recollect.samplers.windows import Segments

__all__ = ["Uniform"]


class Uniform(Sampler):
    """Draws windows uniformly, with replacement, over all valid windows of all rows.

    Each of the ``N`` valid windows has probability ``1 / N``, exactly: ranks
    are drawn with ``rng.integers(0, N)`` and mapped onto the valid-window
    segments, so rows with more valid windows are drawn proportionally more
    often and no draw is ever rejected.
    """

    def _draw(self, segments: Segments, batch_size: int, rng: np.random.Generator) -> WindowDraw:
        total = segments.total
        rows, times = segments.locate(rng.integers(0, total, size=batch_size))
        probabilities = np.full(batch_size, 1.0 / total)
        return WindowDraw(rows, times, probabilities, table_size=total)
