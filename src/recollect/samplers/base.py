"""The sampler interface: which windows come back, and with what probability.

Samplers see counters and validity (a :class:`~recollect.windows.WindowIndex`),
never the data. A buffer calls :meth:`Sampler.bind` once, :meth:`Sampler.on_add`
after every ``add_batch``, :meth:`Sampler.on_clear` on ``clear`` and
:meth:`Sampler.sample` to draw windows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from recollect.windows import WindowIndex

__all__ = ["Sampler", "WindowDraw"]


@dataclasses.dataclass(frozen=True)
class WindowDraw:
    """Windows chosen by a sampler.

    Attributes:
        rows: int64 ``[B]`` env row of each window.
        times: int64 ``[B]`` step time of each window's first step.
        probabilities: float64 ``[B]`` probability with which each window was drawn.
        weights: float64 ``[B]`` importance weights, or None for samplers without.
    """

    rows: np.ndarray
    times: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None


class Sampler:
    """Base class; subclasses implement :meth:`sample` and may track writes."""

    #: Window length fixed at construction (prioritized samplers), or None.
    sequence_length: int | None = None

    def bind(self, index: WindowIndex, sequence_length: int | None) -> None:
        """Attaches the sampler to a buffer's window index."""
        self.index = index
        self.sequence_length = sequence_length

    def on_add(self, is_last: np.ndarray | None) -> None:
        """Called after step ``index.t - 1`` was written to every row."""

    def on_clear(self) -> None:
        """Called after the buffer forgot its steps."""

    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> WindowDraw:
        """Draws ``batch_size`` valid windows of ``num_steps`` steps.

        The caller has checked that at least one valid window exists.
        """
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Arrays and scalars that restore the sampler exactly (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""
