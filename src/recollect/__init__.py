"""recollect: experience replay for reinforcement learning.

Importing recollect imports only numpy and optree; framework adapters
(``recollect.torch``, ``recollect.tf_data``, ``recollect.jax``) import their
framework when used.
"""

from recollect import errors, ids
from recollect.buffers import BufferInfo, ReplayBuffer, Sample, TransitionBuffer, TransitionSample
from recollect.checkpoint import load_buffer, save_buffer
from recollect.manager import ReplayBufferManager
from recollect.memory import estimate_memory
from recollect.nstep import n_step_returns, n_step_transitions
from recollect.observers import Observer
from recollect.samplers import (
    Fifo,
    Lifo,
    LinearSchedule,
    MaxHeap,
    MinHeap,
    Prioritized,
    Sampler,
    Uniform,
)
from recollect.source import SampleSource
from recollect.specs import ArraySpec, spec_from_example, spec_from_space
from recollect.storage.frame_store import FrameStack
from recollect.table import MinSize, Queue, RateLimiter, SampleToInsertRatio, Stack, TableInfo
from recollect.version import __version__

_LAZY_SUBMODULES = (
    "torch",
    "jax",
    "tf_data",
    "tf_agents",
    "datasets",
    "sb3",
    "drivers",
    "service",
    "ray",
)


def __getattr__(name: str):  # PEP 562: framework adapters load on first use
    if name in _LAZY_SUBMODULES:
        import importlib

        try:
            return importlib.import_module(f"recollect.{name}")
        except ImportError as err:  # say which extra installs the missing framework
            from recollect.extras import missing_extra

            raise missing_extra(err, f"recollect.{name}") from err
    raise AttributeError(f"module 'recollect' has no attribute {name!r}")


__all__ = [
    "ArraySpec",
    "BufferInfo",
    "Fifo",
    "FrameStack",
    "Lifo",
    "LinearSchedule",
    "MaxHeap",
    "MinHeap",
    "MinSize",
    "Observer",
    "Prioritized",
    "Queue",
    "RateLimiter",
    "ReplayBuffer",
    "ReplayBufferManager",
    "Sample",
    "SampleSource",
    "SampleToInsertRatio",
    "Sampler",
    "Stack",
    "TableInfo",
    "TransitionBuffer",
    "TransitionSample",
    "Uniform",
    "__version__",
    "errors",
    "estimate_memory",
    "ids",
    "load_buffer",
    "n_step_returns",
    "n_step_transitions",
    "save_buffer",
    "spec_from_example",
    "spec_from_space",
]
