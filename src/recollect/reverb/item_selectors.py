"""Strategies that pick which item is sampled or removed (``reverb.item_selectors``).

Each is a small immutable description; the table builds the vectorized
selection (:mod:`recollect.reverb.selection`) from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from recollect.arguments import is_number
from recollect.errors import InvalidArgumentError


@dataclass(frozen=True)
class Uniform:
    """Every item equally likely: P(i) = 1 / N."""

    kind = "uniform"


@dataclass(frozen=True)
class Fifo:
    """The oldest item (by insertion)."""

    kind = "fifo"


@dataclass(frozen=True)
class Lifo:
    """The newest item (by insertion)."""

    kind = "lifo"


@dataclass(frozen=True)
class Prioritized:
    """P(i) = p_i^a / sum_j p_j^a with ``a = priority_exponent`` (>= 0; 0 is uniform)."""

    priority_exponent: float
    kind = "prioritized"

    def __post_init__(self) -> None:
        e = self.priority_exponent
        if not is_number(e) or not math.isfinite(e) or e < 0:
            raise InvalidArgumentError(
                f"priority_exponent must be a finite number >= 0; got {e!r}. "
                "Pass e.g. Prioritized(priority_exponent=0.8)."
            )


@dataclass(frozen=True)
class _Heap:
    """The item of smallest (``min_heap=True``) or largest priority; ties go to the oldest."""

    min_heap: bool
    kind = "heap"


def MinHeap() -> _Heap:
    """The item of smallest priority (ties: the oldest)."""
    return _Heap(True)


def MaxHeap() -> _Heap:
    """The item of largest priority (ties: the oldest)."""
    return _Heap(False)


Selector = Uniform | Fifo | Lifo | Prioritized | _Heap
Heap = _Heap

__all__ = ["Fifo", "Heap", "Lifo", "MaxHeap", "MinHeap", "Prioritized", "Selector", "Uniform"]
