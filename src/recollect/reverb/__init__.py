"""Reverb 0.14's Python API on recollect: ``import recollect.reverb as reverb``.

Servers, tables, selectors, rate limiters, clients and writers behave as
Reverb's (its source and tests are the specification), in pure Python on numpy:
no TensorFlow (``tf.TensorSpec`` signatures are accepted when it is installed).
A client in the server's process calls the server directly; other processes
reach it over gRPC (``recollect.grpc``, the ``reverb`` extra). The "From
Reverb" docs page lists the deliberate differences.
"""

from __future__ import annotations

from recollect.reverb import (
    errors,
    item_selectors,
    platform,
    rate_limiters,
    structured_writer,
)
from recollect.reverb.client import Client, Writer
from recollect.reverb.errors import DeadlineExceededError, ReverbError
from recollect.reverb.replay_sample import ReplaySample, SampleInfo
from recollect.reverb.reverb_types import TableInfo
from recollect.reverb.server import Server
from recollect.reverb.table import Table
from recollect.reverb.trajectory_writer import TrajectoryColumn, TrajectoryWriter

selectors = item_selectors
structured = structured_writer  # Reverb's alias

#: TensorFlow-side names, imported on first use so that TensorFlow stays optional.
_LAZY = {
    "TrajectoryDataset": ("recollect.reverb.datasets", "TrajectoryDataset"),
    "TimestepDataset": ("recollect.reverb.datasets", "TimestepDataset"),
    "TFClient": ("recollect.reverb.tf_client", "TFClient"),
    "PatternDataset": ("recollect.reverb.pattern_dataset", "PatternDataset"),
    "pattern_dataset_with_info": ("recollect.reverb.pattern_dataset", "pattern_dataset_with_info"),
}


def __getattr__(name: str) -> object:
    """The TensorFlow-side names of ``_LAZY`` (they import TensorFlow)."""
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'recollect.reverb' has no attribute {name!r}")


__all__ = [
    "Client",
    "DeadlineExceededError",
    "PatternDataset",
    "ReplaySample",
    "ReverbError",
    "SampleInfo",
    "Server",
    "TFClient",
    "Table",
    "TableInfo",
    "TimestepDataset",
    "TrajectoryColumn",
    "TrajectoryDataset",
    "TrajectoryWriter",
    "Writer",
    "errors",
    "item_selectors",
    "platform",
    "rate_limiters",
    "selectors",
    "structured",
    "structured_writer",
]
