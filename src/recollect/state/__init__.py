"""The one state format: ``state_dict()`` trees as ``.npy`` files plus a checksummed manifest.

Checkpoints (:mod:`recollect.checkpoint`) and memmap directories both write and
read state through :mod:`recollect.state.files`; :mod:`recollect.state.manifest`
describes the layout, :mod:`recollect.state.v1` reads the older format.
"""

from recollect.state.files import Saved, read_state, write_checkpoint, write_in_place
from recollect.state.manifest import FORMAT_VERSION

__all__ = ["FORMAT_VERSION", "Saved", "read_state", "write_checkpoint", "write_in_place"]
