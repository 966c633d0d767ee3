"""Samplers (Reverb: selectors) decide which windows come back."""

from recollect.samplers.base import Sampler, WindowDraw, importance_weights, registered_sampler
from recollect.samplers.fifo import Fifo, Lifo
from recollect.samplers.heap import MaxHeap, MinHeap
from recollect.samplers.prioritized import Prioritized
from recollect.samplers.schedules import LinearSchedule
from recollect.samplers.sum_tree import SumTree
from recollect.samplers.uniform import Uniform

__all__ = [
    "Fifo",
    "Lifo",
    "LinearSchedule",
    "MaxHeap",
    "MinHeap",
    "Prioritized",
    "Sampler",
    "SumTree",
    "Uniform",
    "WindowDraw",
    "importance_weights",
    "registered_sampler",
]
