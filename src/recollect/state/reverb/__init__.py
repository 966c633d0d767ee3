"""Reading dm-reverb 0.14 checkpoints without TensorFlow (needs the ``protobuf`` package).

:func:`read_checkpoint` reads what Reverb's ``DefaultCheckpointer`` wrote: every table's
definition, rate-limiter counters, signature and items, with each item's column data
decoded bit-exactly (TFRecord CRCs checked, Snappy and delta encoding undone).
"""

from recollect.state.reverb.reader import (
    RateLimiterState,
    ReverbCheckpoint,
    ReverbItem,
    ReverbTable,
    SelectorOptions,
    find_checkpoint,
    read_checkpoint,
)
from recollect.state.reverb.signature import ReverbTensorSpec

__all__ = [
    "RateLimiterState",
    "ReverbCheckpoint",
    "ReverbItem",
    "ReverbTable",
    "ReverbTensorSpec",
    "SelectorOptions",
    "find_checkpoint",
    "read_checkpoint",
]
