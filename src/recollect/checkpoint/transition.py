"""TransitionBuffer checkpoints: the inner ReplayBuffer plus the next-observation state.

Extra files (kind ``"TransitionBuffer"``):

- ``transition-final_ref.npy``: int64 ``[num_envs, stored_steps]``, the final
  observation entry of each stored step (-1: read the next step instead),
  same column layout as the leaves.
- ``transition-pending-NNN.npy``: ``[num_envs, *obs_shape]`` per observation
  leaf, the newest ``next_observation`` of each env; ``transition-has_pending.npy``.
- ``transition-finals-NNN.npy`` / ``transition-finals-times.npy``: the live
  entries ``[start, n)`` of the final-observation ring, in entry order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from recollect.checkpoint.atomic import atomic_write
from recollect.checkpoint.reader import CheckpointReader, _int, read_replay_part
from recollect.checkpoint.state import decode_rng, encode_rng
from recollect.checkpoint.writer import CheckpointWriter, stored_layout, write_replay_part
from recollect.errors import CheckpointError
from recollect.samplers.uniform import Uniform

__all__ = ["read_transition_buffer", "save_transition_buffer"]


def _rng_entry(rng: Any) -> Any:
    if rng is None:
        return None
    return encode_rng(rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng))


def _write_extras(tb: Any, writer: CheckpointWriter) -> dict[str, Any]:
    offset, count = stored_layout(tb._buffer)
    writer.columns("transition-final_ref.npy", tb._final_ref[:, :, None], offset, count)
    for i, pending in enumerate(tb._pending):
        writer.array(f"transition-pending-{i:03d}.npy", pending)
    writer.array("transition-has_pending.npy", tb._has_pending)
    finals = tb._finals
    pos = np.arange(finals.start, finals.n) % max(finals.size, 1)
    for i, array in enumerate(finals.arrays):
        writer.array(f"transition-finals-{i:03d}.npy", array[pos] if finals.size else array)
    writer.array("transition-finals-times.npy", finals.times[pos] if finals.size else finals.times)
    return {"finals": {"size": finals.size, "start": finals.start, "n": finals.n}}


def _options(tb: Any) -> dict[str, Any]:
    """Constructor options an empty TransitionBuffer must keep (it has no sampler state yet)."""
    prioritized, frame_stack = tb._prioritized, tb._frame_stack
    return {
        "prioritized": None if prioritized is None else prioritized.get_config(),
        "frame_stack": None if frame_stack is None else frame_stack.config(),
    }


def _empty_transition_buffer(manifest: dict[str, Any], where: str) -> Any:
    from recollect.buffers.transition_buffer import TransitionBuffer
    from recollect.samplers.prioritized import Prioritized
    from recollect.storage.frame_store import FrameStack

    b = manifest["buffer"]
    rng = decode_rng(manifest.get("rng"), where)
    options: dict[str, Any] = {}
    try:
        if b.get("prioritized") is not None:
            options["prioritized"] = Prioritized(**b["prioritized"])
        stack = b.get("frame_stack")
        if stack is not None:
            padding = stack["padding"]
            padding = padding if isinstance(padding, str) else np.asarray(padding)
            options["frame_stack"] = FrameStack(**{**stack, "padding": padding})
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{where}: invalid TransitionBuffer options: {err}") from err
    capacity, num_envs = _int(b, "capacity", where, 1), _int(b, "num_envs", where, 1)
    return TransitionBuffer(capacity, num_envs, rng, **options)


def save_transition_buffer(tb: Any, path: str | os.PathLike) -> Path:
    """Writes a :class:`~recollect.TransitionBuffer` checkpoint (see :func:`save_buffer`)."""

    def write(root: Path) -> None:
        writer = CheckpointWriter(root)
        header = {"capacity": tb.capacity, "num_envs": tb.num_envs, **_options(tb)}
        if tb._buffer is None:
            body = {"buffer": header, "rng": _rng_entry(tb._rng), "transition": None}
        else:
            body = write_replay_part(tb._buffer, writer)
            body["transition"] = {**header, **_write_extras(tb, writer)}
        writer.manifest("TransitionBuffer", body)

    if tb._buffer is None:
        return atomic_write(path, write)
    with tb._buffer._lock:
        return atomic_write(path, write)


def _restore_extras(tb: Any, reader: CheckpointReader, extras: dict[str, Any]) -> None:
    buffer, where = tb._buffer, reader.where
    offset, count = stored_layout(buffer)
    ref = np.full((tb.num_envs, buffer.max_length, 1), -1, np.int64)
    reader.columns_into("transition-final_ref.npy", ref, offset, count)
    tb._final_ref = ref[:, :, 0].copy()
    pending = [reader.array(f"transition-pending-{i:03d}.npy") for i in range(len(tb._pending))]
    has_pending = reader.array("transition-has_pending.npy")
    info = extras.get("finals")
    size, start, n = (_int(info, k, where, 0, "transition.finals") for k in ("size", "start", "n"))
    finals = tb._finals
    entries = [reader.array(f"transition-finals-{i:03d}.npy") for i in range(len(finals.arrays))]
    times = reader.array("transition-finals-times.npy")
    expect = [
        ((tb.num_envs, *s), d)
        for s, d in zip(tb._obs_flat.shapes, tb._obs_flat.dtypes, strict=True)
    ]
    got = [(p.shape, p.dtype) for p in pending]
    live = n - start if size else 0
    if got != expect or has_pending.shape != (tb.num_envs,) or len(times) != live or n < start:
        raise CheckpointError(f"{where}: TransitionBuffer state does not match its spec.")
    tb._pending, tb._has_pending = pending, has_pending.astype(bool)
    finals.size, finals.start, finals.n = size, start, n
    pos = np.arange(start, n) % max(size, 1)
    finals.arrays = []
    for entry, shape, dtype in zip(entries, tb._obs_flat.shapes, tb._obs_flat.dtypes, strict=True):
        array = np.zeros((size, *shape), dtype)
        if size:
            array[pos] = entry
        finals.arrays.append(array)
    finals.times = np.zeros(size, np.int64)
    if size:
        finals.times[pos] = times


def read_transition_buffer(reader: CheckpointReader, mmap: bool) -> Any:
    """Rebuilds a :class:`~recollect.TransitionBuffer` from an open checkpoint."""
    from recollect.buffers.transition_buffer import TransitionBuffer

    manifest, where = reader.manifest, reader.where
    extras = manifest.get("transition")
    if extras is None:
        return _empty_transition_buffer(manifest, where)
    if not isinstance(extras, dict):
        raise CheckpointError(f"{where}: field transition must be an object.")
    buffer = read_replay_part(reader, mmap)
    spec = buffer.data_spec
    if not isinstance(spec, dict) or "observation" not in spec:
        raise CheckpointError(f"{where}: a TransitionBuffer spec needs an 'observation' entry.")
    tb = TransitionBuffer(buffer.capacity, buffer.num_envs)
    if not isinstance(buffer.sampler, Uniform):
        tb._prioritized = buffer.sampler  # the restored sampler (e.g. Prioritized)
    tb._attach(buffer, spec["observation"])
    _restore_extras(tb, reader, extras)
    return tb
