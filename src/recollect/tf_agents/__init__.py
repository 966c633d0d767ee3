"""TF-Agents compatible replay buffers backed by a :class:`~recollect.ReplayBuffer`.

:class:`PyUniformReplayBuffer` and :class:`TFUniformReplayBuffer` keep
TF-Agents' constructor arguments, method names and return structures
(``add_batch``, ``get_next``, ``as_dataset``, ``gather_all``, ``clear``,
``num_frames``, ``capacity``, ``data_spec``); specs may be ``tf.TensorSpec``,
TF-Agents array specs or :class:`~recollect.ArraySpec`, in any nest. TF-Agents
itself is not needed: the tutorial code runs after replacing its imports with
``from recollect.tf_agents import py_uniform_replay_buffer,
tf_uniform_replay_buffer, tensor_spec``.

``TFUniformReplayBuffer`` returns tensors and works inside ``tf.function``:
``add_batch`` (e.g. as a driver observer), ``get_next``, ``gather_all`` and
``num_frames`` become ``tf.numpy_function`` ops on symbolic input.
``PyUniformReplayBuffer`` returns numpy arrays.

Both are ``tf.Module``s: ``tf.train.Checkpoint(replay_buffer=rb)`` and
TF-Agents' ``common.Checkpointer(dir, replay_buffer=rb)`` save and restore
them (:mod:`recollect.tf_agents.checkpoint`).

Deliberate differences from TF-Agents:

- An empty ``PyUniformReplayBuffer`` raises
  :class:`~recollect.errors.NotEnoughDataError` where TF-Agents returns
  uninitialised ``np.empty`` garbage. (An empty ``TFUniformReplayBuffer``
  raises :class:`EmptyBufferError`, a ``tf.errors.InvalidArgumentError``
  whose message starts with TF-Agents' "TFUniformReplayBuffer is empty. Make
  sure to add items before sampling the buffer.", as TF-Agents does.)
- ``num_steps`` > ``max_length`` raises
  :class:`~recollect.errors.InvalidArgumentError`; too few steps stored for
  ``num_steps`` says how many more are needed (TF-Agents: "is empty"; the
  ``TFUniformReplayBuffer`` message starts with TF-Agents' text, then says it).
- A failed ``add_batch`` changes nothing (TF-Agents may advance its write
  position first).
- Windows never span the ring's write position nor, with a top-level bool
  ``is_last`` leaf, an episode end.
- ``BufferInfo.ids`` are recollect item ids (``recollect.ids.encode(row,
  step_time)``, never reused), shaped like TF-Agents'.
- ``PyUniformReplayBuffer``: ``num_frames()`` works, ``gather_all()`` returns
  only stored steps oldest first, ``as_dataset`` accepts ``num_parallel_calls``.
- Checkpoints hold recollect's state format (inside a ``PythonState``), not
  TF-Agents' variables: they restore into recollect buffers only.
- ``add_batch`` inside a ``tf.function`` returns an int64 tensor (items
  stored), not an op; ``table_fn`` must be None.

The buffers live in :mod:`.py_uniform` and :mod:`.tf_uniform` (their shared
``tf.Module`` in :mod:`.base`); this module re-exports them and the stand-ins for
TF-Agents' modules.
"""

from __future__ import annotations

import types
from typing import Any

import optree

from recollect.extras import missing_extra

try:  # first, so that a missing TensorFlow names the extra to install
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_agents") from None

from recollect.buffers.sample import BufferInfo
from recollect.specs import ArraySpec
from recollect.tf_agents.empty import EmptyBufferError
from recollect.tf_agents.py_uniform import PyUniformReplayBuffer
from recollect.tf_agents.tf_uniform import TFUniformReplayBuffer

__all__ = [
    "EmptyBufferError",
    "PyUniformReplayBuffer",
    "TFUniformReplayBuffer",
    "py_uniform_replay_buffer",
    "tensor_spec",
    "tf_uniform_replay_buffer",
]


def to_nest_array_spec(nest: Any) -> Any:
    """Converts a nest of ``tf.TensorSpec`` (or any spec) to :class:`~recollect.ArraySpec`."""
    return optree.tree_map(
        ArraySpec.from_spec,
        nest,
        is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"),
        none_is_leaf=False,
    )


#: Stand-ins for the TF-Agents modules the tutorial imports.
py_uniform_replay_buffer = types.SimpleNamespace(PyUniformReplayBuffer=PyUniformReplayBuffer)
tf_uniform_replay_buffer = types.SimpleNamespace(
    TFUniformReplayBuffer=TFUniformReplayBuffer, BufferInfo=BufferInfo
)
tensor_spec = types.SimpleNamespace(TensorSpec=tf.TensorSpec, to_nest_array_spec=to_nest_array_spec)
