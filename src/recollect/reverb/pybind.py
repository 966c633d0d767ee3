"""Names of Reverb's ``pybind`` module that Python code refers to (selector classes).

Reverb's C++ bindings do not exist here; code that checks
``isinstance(selector, pybind.HeapSelector)`` keeps working.
"""

from __future__ import annotations

from recollect.reverb.item_selectors import Fifo as FifoSelector
from recollect.reverb.item_selectors import Heap as HeapSelector
from recollect.reverb.item_selectors import Lifo as LifoSelector
from recollect.reverb.item_selectors import Prioritized as PrioritizedSelector
from recollect.reverb.item_selectors import Uniform as UniformSelector

__all__ = [
    "FifoSelector",
    "HeapSelector",
    "LifoSelector",
    "PrioritizedSelector",
    "UniformSelector",
]


def __getattr__(name: str) -> object:
    if name == "Checkpointer":  # lazily: platform imports nothing of this module
        from recollect.reverb.platform.checkpointers_lib import CheckpointerBase

        return CheckpointerBase
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
