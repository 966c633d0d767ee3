"""Schedules for sampler exponents, e.g. annealing ``beta`` of prioritized replay to 1."""

from __future__ import annotations

import dataclasses

import numpy as np

from recollect.arguments import check_int
from recollect.errors import InvalidArgumentError

__all__ = ["LinearSchedule"]


@dataclasses.dataclass(frozen=True)
class LinearSchedule:
    """Goes linearly from ``start`` to ``end`` over ``num_steps`` steps, then stays at ``end``.

    ``schedule(step) = start + (end - start) * min(step, num_steps) / num_steps``.
    Schaul et al. (2016) anneal the importance-sampling exponent ``beta`` from
    about 0.4 to 1.0 over training.

    Args:
        start: value at step 0.
        end: value from step ``num_steps`` on.
        num_steps: steps of the ramp (int >= 1).

    Raises:
        InvalidArgumentError: ``num_steps`` < 1, a non-finite value, or (on
            call) a negative step.

    Example:
        >>> beta = LinearSchedule(0.4, 1.0, num_steps=100_000)
        >>> beta(0), beta(50_000), beta(10**9)
        (0.4, 0.7, 1.0)
        >>> # buf.sample(256, importance_sampling_exponent=beta(step))
    """

    start: float = 0.4
    end: float = 1.0
    num_steps: int = 100_000

    def __post_init__(self) -> None:
        check_int("num_steps", self.num_steps, minimum=1, show_name=False)
        if not (np.isfinite(self.start) and np.isfinite(self.end)):
            raise InvalidArgumentError(
                f"`start` and `end` must be finite; got start={self.start!r}, end={self.end!r}."
            )

    def __call__(self, step: int) -> float:
        """The value at ``step`` (>= 0)."""
        if step < 0:
            raise InvalidArgumentError(f"`step` must be >= 0; got step={step!r}.")
        fraction = min(int(step), self.num_steps) / self.num_steps
        return float(self.start + (self.end - self.start) * fraction)
