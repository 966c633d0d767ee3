"""The TF-Agents buffers in TensorFlow checkpoints: recollect's state inside a ``PythonState``.

``tf.train.Checkpoint(replay_buffer=rb)`` (and TF-Agents' ``common.Checkpointer``)
saves every trackable attribute of ``rb``; :class:`TrackableBufferState` is the one
holding the data. It serializes :meth:`recollect.ReplayBuffer.state_dict`
(storage arrays, clocks, episode ends, sampling rng) without pickle: an
``.npz`` archive of the arrays (read back with ``allow_pickle=False``) plus a
JSON description of the tree with the buffer's :meth:`~recollect.ReplayBuffer.config`,
which a restore checks against the buffer it restores into.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.errors import CheckpointError
from recollect.state.manifest import from_json, to_json

__all__ = ["TrackableBufferState", "decode_state", "encode_state"]

_FORMAT = "recollect.tf_agents.BufferState/1"
_META = "__meta__"


def _encode(node: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(node, np.ndarray):
        arrays.append(node)
        return {"__array__": len(arrays) - 1}
    if isinstance(node, Mapping):
        return {"__dict__": [[k, _encode(v, arrays)] for k, v in node.items()]}
    if isinstance(node, list | tuple):
        return {"__list__": [_encode(v, arrays) for v in node], "tuple": isinstance(node, tuple)}
    return to_json(node)


def _decode(node: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(node, dict):
        if "__array__" in node:
            return arrays[f"a{node['__array__']}"]
        if "__dict__" in node:
            return {k: _decode(v, arrays) for k, v in node["__dict__"]}
        if "__list__" in node:
            items = [_decode(v, arrays) for v in node["__list__"]]
            return tuple(items) if node["tuple"] else items
    return from_json(node)


def encode_state(buffer: ReplayBuffer) -> bytes:
    """The buffer's state as bytes: an ``.npz`` of its arrays and a JSON tree (no pickle)."""
    arrays: list[np.ndarray] = []
    with buffer.writer.lock:
        tree = _encode(buffer.state_dict(), arrays)
        arrays = [np.array(a, copy=True) for a in arrays]  # a consistent copy under the lock
    meta = {"format": _FORMAT, "config": to_json(buffer.config()), "state": tree}
    out = io.BytesIO()
    named = {f"a{k}": a for k, a in enumerate(arrays)}
    named[_META] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    # allow_pickle (numpy's default) given by name: then mypy matches **named to the arrays
    np.savez(out, allow_pickle=True, **named)
    return out.getvalue()


def decode_state(data: bytes, buffer: ReplayBuffer) -> None:
    """Restores :func:`encode_state` output into ``buffer`` (same config).

    Raises:
        CheckpointError: not this format, or saved from a buffer of another config.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        meta = json.loads(arrays.pop(_META).tobytes().decode())
    except Exception as err:
        raise CheckpointError(
            f"the replay buffer's checkpoint value is not a recollect buffer state ({err}); "
            "restore a checkpoint written by recollect.tf_agents."
        ) from err
    if meta.get("format") != _FORMAT:
        raise CheckpointError(
            f"replay buffer state format {meta.get('format')!r}, expected {_FORMAT!r}."
        )
    saved = meta["config"]
    current = to_json(buffer.config())
    if json.dumps(saved, sort_keys=True) != json.dumps(current, sort_keys=True):
        raise CheckpointError(
            "the checkpoint holds a replay buffer of another spec or geometry: saved config "
            f"{saved}, this buffer's {current}; build the buffer with the saved arguments."
        )
    buffer.load_state_dict(_decode(meta["state"], arrays))


class TrackableBufferState(tf.train.experimental.PythonState):
    """A ``PythonState`` holding a :class:`~recollect.ReplayBuffer` (see the module docstring).

    Args:
        buffer: the buffer saved and restored.
        on_restore: called after a restore.
    """

    def __init__(self, buffer: ReplayBuffer, on_restore: Callable[[], None]) -> None:
        self._buffer = buffer
        self._on_restore = on_restore

    def serialize(self) -> bytes:
        """The buffer's state (``encode_state``)."""
        return encode_state(self._buffer)

    def deserialize(self, string_value: Any) -> None:
        """Restores the buffer from ``string_value`` (``decode_state``).

        Raises:
            CheckpointError: see :func:`decode_state`.
        """
        decode_state(bytes(string_value), self._buffer)
        self._on_restore()
