"""Builds a buffer's storage from its constructor options (RAM ring, memmap, frame store)."""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import FlatSpec
from recollect.storage.base import Storage
from recollect.storage.compressed_memmap import disk_slots_factory
from recollect.storage.compression.codecs import Codec, resolve
from recollect.storage.compression.compressed_storage import CompressedStorage
from recollect.storage.episode_ends import EpisodeEnd
from recollect.storage.frames.frame_store import FrameStackStorage, resolve_frame_stacks
from recollect.storage.gather import Gatherer
from recollect.storage.memmap import MemmapStorage, memmap_allocator
from recollect.storage.ring import RingStorage

__all__ = [
    "STORAGES",
    "block_storage",
    "bool_scalar",
    "check_storage",
    "make_storage",
    "prepare_writes",
    "resolve_compression",
]

STORAGES = ("numpy", "memmap")


def check_storage(storage: Any) -> str:
    """Validates a ``storage`` argument.

    Raises:
        InvalidArgumentError: not one of :data:`STORAGES`.
    """
    if storage not in STORAGES:
        raise InvalidArgumentError(
            f"`storage` must be one of {STORAGES}; got storage={storage!r}. Use 'memmap' "
            "(with a directory) for buffers larger than RAM."
        )
    return storage


def bool_scalar(flat: FlatSpec, key: str) -> int | None:
    """Index of the top-level bool scalar leaf ``key``, or None."""
    if key not in flat.paths:
        return None
    i = flat.index(key)
    if flat.shapes[i] != () or flat.dtypes[i] != np.bool_:
        return None
    return i


def resolve_compression(
    flat: FlatSpec, compression: Any, storage: str = "numpy", episode_end: EpisodeEnd | None = None
) -> dict[int, Codec]:
    """Maps ``{leaf path: codec name or Codec}`` to ``{leaf index: Codec}``, validating each.

    Raises:
        InvalidArgumentError: ``compression`` is not a dict, names an unknown
            codec or a flag leaf (``is_first``/``is_last``, the ``episode_end`` leaf).
        SpecError: a path names no leaf.
    """
    if not compression:
        return {}
    if not isinstance(compression, dict):
        raise InvalidArgumentError(
            "`compression` must be a dict {leaf path: codec}; got "
            f"{type(compression).__name__}. Example: compression={{'observation': 'zstd'}}."
        )
    codecs = {}
    for path, codec in compression.items():
        i = flat.index(path)
        flag = path in ("is_first", "is_last") and bool_scalar(flat, path) is not None
        if flag or (episode_end is not None and i == episode_end.index):
            raise InvalidArgumentError(
                f"compression['{path}']: the episode flag leaves stay uncompressed (is_first, "
                "is_last and the episode_end leaf: read at every write, a few bytes a step); "
                "compress the large leaves only, e.g. the observation."
            )
        codecs[i] = resolve(codec, path)
    return codecs


def block_storage(storage: Storage) -> bool:
    """Whether ``storage.write`` takes a block of steps per row (slots ``[k, T]``)."""
    if isinstance(storage, CompressedStorage):
        storage = storage.inner
    return isinstance(storage, RingStorage)


def prepare_writes(storage: Storage) -> Any:
    """``storage.prepare`` (compress a write's leaves, outside the table lock) or None."""
    if isinstance(storage, CompressedStorage | FrameStackStorage):
        return storage.prepare
    return None


def make_storage(
    flat: FlatSpec,
    num_envs: int,
    max_length: int,
    *,
    episode_end: EpisodeEnd | None = None,
    storage: str = "numpy",
    directory: Any = None,
    reopen: bool = False,
    frame_stacks: dict[str, Any] | None = None,
    gatherer: Gatherer | None = None,
    compression: dict[str, Any] | None = None,
) -> Storage:
    """Returns the storage for a buffer's geometry and options.

    Args:
        flat: the flattened spec; ``episode_end`` the leaf that marks episode ends (frame
            stacks restart after one).
        num_envs, max_length: the ring geometry.
        storage: ``"numpy"`` or ``"memmap"`` (files in ``directory``; ``reopen``
            maps existing files).
        frame_stacks: ``{leaf path: FrameStack}``.
        gatherer: the gatherer samples go through (default: the storage's own).
        compression: ``{leaf path: codec}``: those leaves keep each value (each
            frame, for frame-stacked leaves) compressed; see
            :mod:`recollect.storage.compression.codecs`.
            With memmap the compressed values live in block files of ``directory``
            (:mod:`recollect.storage.compressed_memmap`).

    Raises:
        InvalidArgumentError: unknown ``storage``; ``directory`` missing for
            memmap or given for numpy.
        SpecError: bad frame stacks, or frame stacks without an ``is_first``
            or ``is_last`` leaf to mark episode starts.
        CheckpointError: reopened files of another shape or dtype.
    """
    check_storage(storage)
    if (storage == "memmap") != (directory is not None):
        raise InvalidArgumentError(
            "`directory` is required with storage='memmap' and only allowed with it; got "
            f"storage={storage!r}, directory={directory!r}."
        )
    stacks = resolve_frame_stacks(flat, frame_stacks)
    codecs = resolve_compression(flat, compression, storage, episode_end)
    plain_codecs = {i: c for i, c in codecs.items() if i not in stacks}
    frame_codecs = {i: c for i, c in codecs.items() if i in stacks}
    is_first = bool_scalar(flat, "is_first")
    if stacks and is_first is None and episode_end is None:
        raise SpecError(
            "frame_stacks need to know where episodes start: add a top-level bool scalar "
            f"'is_first' or 'is_last' leaf to data_spec, or give episode_end (leaves: "
            f"{flat.paths})."
        )
    gatherer = gatherer if gatherer is not None else Gatherer()
    inner: Any = RingStorage
    kwargs: dict[str, Any] = {}
    slots_kwargs: dict[str, Any] = {}
    if storage == "memmap":
        path = pathlib.Path(directory)
        inner = functools.partial(MemmapStorage, directory=path, reopen=reopen)
        kwargs["allocate"] = memmap_allocator(path, reopen)
        if codecs:  # compressed values in block files beside the leaf files
            slots_kwargs["make_slots"] = disk_slots_factory(path, reopen)

    def build(spec: FlatSpec) -> Any:
        if not stacks:
            return inner(spec, num_envs, max_length, gatherer)
        return FrameStackStorage(
            spec, num_envs, max_length, stacks, is_first, episode_end, inner, gatherer=gatherer,
            codecs=frame_codecs, **kwargs, **slots_kwargs,
        )  # fmt: skip

    if not plain_codecs:
        return build(flat)
    return CompressedStorage(flat, num_envs, max_length, plain_codecs, build, **slots_kwargs)
