"""recollect: experience replay for reinforcement learning.

Importing recollect imports only numpy and optree; framework adapters
(``recollect.torch``, ``recollect.tf_data``, ``recollect.jax``) import their
framework when used.

Public paths and where the code lives: the folders state the layers
(``adapters/`` torch, jax, tf_data; ``collect/`` observers and drivers;
``storage/compression/``, ``storage/frames/``; ...), and the older dotted names
keep working through a lazy alias finder on ``sys.meta_path``: ``import
recollect.torch`` loads ``recollect.adapters.torch`` and binds the same module
object under both names (``recollect.torch is recollect.adapters.torch``), so
user code, ``rc.torch`` attribute access and pickles that name an old path
(``recollect.windows.WindowIndex``, ``recollect.storage.codecs.Zstd``, ...) load
as before. The finder loads nothing until such a name is imported, and is
consulted last, after the ordinary finders (``_MOVED`` lists the old names).
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

from recollect import errors, ids
from recollect.buffers import BufferInfo, ReplayBuffer, Sample, TransitionBuffer, TransitionSample
from recollect.buffers.checkpoint import load_buffer, save_buffer
from recollect.buffers.source import SampleSource
from recollect.collect.observers import Observer
from recollect.manager import ReplayBufferManager
from recollect.memory import estimate_memory
from recollect.nstep import n_step_returns, n_step_transitions
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
from recollect.specs import ArraySpec, spec_from_example, spec_from_space
from recollect.storage.frames.frame_store import FrameStack
from recollect.table import MinSize, Queue, RateLimiter, SampleToInsertRatio, Stack, TableInfo
from recollect.version import __version__

# old dotted name -> the module it now lives in (the folders' layout, issue 37)
_MOVED = {
    "recollect.torch": "recollect.adapters.torch",
    "recollect.jax": "recollect.adapters.jax",
    "recollect.tf_data": "recollect.adapters.tf_data",
    "recollect._tf_eager": "recollect.adapters.tf_data.eager",
    "recollect._tf_chunks": "recollect.adapters.tf_data.chunks",
    "recollect._tf_pass": "recollect.adapters.tf_data.single_pass",
    "recollect.prefetch": "recollect.adapters.prefetch",
    "recollect.source": "recollect.buffers.source",
    "recollect.observers": "recollect.collect.observers",
    "recollect.drivers": "recollect.collect.drivers",
    "recollect.windows": "recollect.samplers.windows",
    "recollect.checkpoint": "recollect.buffers.checkpoint",
    "recollect.storage.codec_base": "recollect.storage.compression.codec_base",
    "recollect.storage.codecs": "recollect.storage.compression.codecs",
    "recollect.storage.compressed": "recollect.storage.compression.compressed",
    "recollect.storage.compressed_parts": "recollect.storage.compression.compressed_parts",
    "recollect.storage.compressed_storage": "recollect.storage.compression.compressed_storage",
    "recollect.storage.zstd_codec": "recollect.storage.compression.zstd_codec",
    "recollect.storage.zstd_frames": "recollect.storage.compression.zstd_frames",
    "recollect.storage.zstd_native": "recollect.storage.compression.zstd_native",
    "recollect.storage.frame_compressed": "recollect.storage.frames.frame_compressed",
    "recollect.storage.frame_layout": "recollect.storage.frames.frame_layout",
    "recollect.storage.frame_stack": "recollect.storage.frames.frame_stack",
    "recollect.storage.frame_store": "recollect.storage.frames.frame_store",
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old name as the module it moved to (the same object, not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system set the alias's spec on the module; give it back its own
        module.__spec__ = self.own_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old dotted names of moved modules (``_MOVED``); nothing else."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


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
