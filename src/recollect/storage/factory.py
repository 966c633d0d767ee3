"""Builds a buffer's storage from its constructor options (RAM ring, memmap, frame store)."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, SpecError
from recollect.memory import _check_storage, check_memory, estimate_memory
from recollect.specs import FlatSpec
from recollect.storage.frame_store import FrameStackStorage, resolve_frame_stacks
from recollect.storage.memmap import (
    MemmapPersistence,
    MemmapStorage,
    leaf_file_names,
    memmap_allocator,
)
from recollect.storage.ring import RingStorage

__all__ = ["make_storage"]


def _bool_scalar(flat: FlatSpec, key: str) -> int | None:
    if key not in flat.paths:
        return None
    i = flat.index(key)
    if flat.shapes[i] != () or flat.dtypes[i] != np.bool_:
        return None
    return i


def _config(flat: FlatSpec, capacity: int, num_envs: int, stacks: dict[str, Any]) -> dict[str, Any]:
    from recollect.checkpoint.format import describe_spec  # shared manifest vocabulary

    config = {
        "spec": describe_spec(flat.spec),
        "capacity": capacity,
        "num_envs": num_envs,
        "frame_stacks": {path: stack.config() for path, stack in (stacks or {}).items()},
    }
    return json.loads(json.dumps(config))  # JSON-normal form, comparable after a reload


def make_storage(
    buffer: Any,
    storage: str = "numpy",
    directory: Any = None,
    frame_stacks: dict[str, Any] | None = None,
    force: bool = False,
) -> tuple[Any, MemmapPersistence | None]:
    """Returns ``(storage, persistence)`` for a ReplayBuffer under construction.

    ``buffer`` must already have ``_flat``, ``_num_envs``, ``_max_length``,
    ``_index`` and ``_is_last``. ``persistence`` is None except for memmap.

    Raises:
        InvalidArgumentError: unknown ``storage``; ``directory`` missing for
            memmap or given for numpy.
        InsufficientMemoryError: a RAM buffer larger than ``MemAvailable``
            (unless ``force``).
        SpecError: bad frame stacks, or frame stacks without an ``is_first``
            or ``is_last`` leaf to mark episode starts.
        CheckpointError: an existing memmap directory of another buffer.
    """
    _check_storage(storage)
    flat, num_envs, max_length = buffer._flat, buffer._num_envs, buffer._max_length
    if (storage == "memmap") != (directory is not None):
        raise InvalidArgumentError(
            "`directory` is required with storage='memmap' and only allowed with it; got "
            f"storage={storage!r}, directory={directory!r}."
        )
    stacks = resolve_frame_stacks(flat, frame_stacks)
    is_first = _bool_scalar(flat, "is_first")
    if stacks and is_first is None and buffer._is_last is None:
        raise SpecError(
            "frame_stacks need to know where episodes start: add a top-level bool scalar "
            f"'is_first' or 'is_last' leaf to data_spec (leaves: {flat.paths})."
        )
    check_memory(
        estimate_memory(flat.spec, max_length * num_envs, num_envs, frame_stacks=frame_stacks),
        storage,
        force,
    )
    persist, inner, allocate = None, RingStorage, None
    if storage == "memmap":
        config = _config(flat, max_length * num_envs, num_envs, frame_stacks)
        persist = MemmapPersistence(directory, config)
        reopen = persist.existing is not None
        path = pathlib.Path(directory)
        names = leaf_file_names(flat.paths)
        inner = functools.partial(MemmapStorage, directory=path, reopen=reopen, names=names)
        allocate = memmap_allocator(path, reopen)
    if not stacks:
        return inner(flat, num_envs, max_length), persist
    kwargs = {} if allocate is None else {"allocate": allocate}
    store = FrameStackStorage(
        flat,
        num_envs,
        max_length,
        stacks,
        buffer._index,
        is_first,
        buffer._is_last,
        inner,
        **kwargs,
    )
    return store, persist
