"""``reverb.platform``: the checkpointers."""

from recollect.reverb.platform import checkpointers_lib

__all__ = ["checkpointers_lib"]
