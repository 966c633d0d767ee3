"""Uniform sampling over every valid window (Reverb: ``Uniform`` selector)."""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.arguments import no_options
from recollect.samplers.base import Sampler, WindowDraw

__all__ = ["Uniform"]


class Uniform(Sampler):
    """Draws windows uniformly, with replacement, over all valid windows of all rows.

    Each of the ``N`` valid windows has probability ``1 / N``, exactly: ranks
    are drawn with ``rng.integers(0, N)`` and mapped onto the valid-window
    segments, so rows with more valid windows are drawn proportionally more
    often and no draw is ever rejected.
    """

    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> WindowDraw:
        no_options("Uniform sampling", kwargs)
        segments = self.index.segments(num_steps, within_episode)
        total = segments.total
        rows, times = segments.locate(rng.integers(0, total, size=batch_size))
        probabilities = np.full(batch_size, 1.0 / total)
        return WindowDraw(rows, times, probabilities, table_size=total)
