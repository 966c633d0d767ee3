"""On-disk storage: every leaf is a ``.npy`` file mapped with ``np.memmap``.

``ReplayBuffer(..., storage="memmap", directory=d)`` keeps its arrays in files
under ``d`` so capacity can exceed RAM (the OS pages data in and out); the
API and sampling semantics are those of the RAM ring. The directory also holds
``manifest.json`` (``format_version``, spec, geometry, frame stacks, counters,
sampler state): constructing a buffer with the same arguments on an existing
directory reopens it with its data, counters and sampler state.

The manifest is written on :meth:`MemmapPersistence.flush` (``buf.flush()``,
and automatically when the buffer is garbage collected or the interpreter
exits). The first write after a flush marks the manifest ``dirty``; reopening
a dirty directory raises :class:`~recollect.errors.CheckpointError` rather than
restoring counters that no longer match the data.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import weakref
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.specs import FlatSpec
from recollect.storage.ring import RingStorage

__all__ = ["FORMAT_VERSION", "MANIFEST", "MemmapPersistence", "MemmapStorage", "memmap_allocator"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_SAMPLER_FILE = "sampler_state.npz"


def memmap_allocator(directory: pathlib.Path, reopen: bool) -> Any:
    """Returns ``allocate(name, shape, dtype)`` creating (or reopening) ``directory/name.npy``.

    Zero-size arrays are plain numpy arrays (nothing to map).

    Raises:
        CheckpointError: on reopen, a file is missing or has another shape/dtype.
    """

    def allocate(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if int(np.prod(shape)) == 0:
            return np.zeros(shape, dtype)
        path = directory / f"{name}.npy"
        if not reopen:
            return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        try:
            array = np.lib.format.open_memmap(path, mode="r+")
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot reopen memmap file {path}: {err}") from err
        if array.shape != tuple(shape) or array.dtype != dtype:
            raise CheckpointError(
                f"memmap file {path} holds shape {array.shape}, dtype {array.dtype}; expected "
                f"shape {tuple(shape)}, dtype {dtype}. The directory belongs to another buffer."
            )
        return array

    return allocate


def leaf_file_names(paths: list[str]) -> list[str]:
    """``leaf-003-observation.camera``: index and file-safe path of each leaf."""
    return [f"leaf-{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '.', p)}" for i, p in enumerate(paths)]


class MemmapStorage(RingStorage):
    """:class:`RingStorage` whose leaf arrays are memory-mapped ``.npy`` files.

    Args:
        flat_spec, num_envs, max_length: as :class:`RingStorage`.
        directory: where the files live (``leaf-<i>-<path>.npy``).
        reopen: map existing files (``r+``) instead of creating them.
        names: file names (without ``.npy``) per leaf; default from the paths.
    """

    def __init__(
        self,
        flat_spec: FlatSpec,
        num_envs: int,
        max_length: int,
        directory: pathlib.Path,
        reopen: bool = False,
        names: list[str] | None = None,
    ) -> None:
        self._allocator = memmap_allocator(pathlib.Path(directory), reopen)
        self._names = iter(names or leaf_file_names(flat_spec.paths))
        self.on_write: Any = None
        super().__init__(flat_spec, num_envs, max_length)

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._allocator(next(self._names), (self.num_envs, self.max_length, *shape), dtype)

    def write_column(self, slot: int, leaves: Any) -> None:
        if self.on_write is not None:
            hook, self.on_write = self.on_write, None
            hook()
        super().write_column(slot, leaves)


def _write_json(path: pathlib.Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class MemmapPersistence:
    """Manifest, counters and sampler state of one memmap directory.

    Args:
        directory: the buffer's directory (created if missing).
        config: what identifies the buffer (spec, capacity, num_envs, frame stacks);
            a reopen must match it exactly.

    Raises:
        CheckpointError: the directory's manifest is unreadable, of another
            ``format_version``, or describes another buffer.
    """

    def __init__(self, directory: Any, config: dict[str, Any]) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.manifest_path = self.directory / MANIFEST
        self.existing = self._read() if self.manifest_path.exists() else None

    def _read(self) -> dict[str, Any]:
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot read {self.manifest_path}: {err}") from err
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{self.manifest_path} has format_version={version!r}; this recollect reads "
                f"format_version={FORMAT_VERSION}."
            )
        for key, value in self.config.items():
            if manifest.get(key) != value:
                raise CheckpointError(
                    f"memmap directory {self.directory} holds a buffer with {key}="
                    f"{manifest.get(key)!r}, but this buffer has {key}={value!r}. Use the same "
                    "arguments to reopen it, or another directory."
                )
        if manifest.get("dirty"):
            raise CheckpointError(
                f"memmap directory {self.directory} was written after its last flush(); its "
                "counters no longer match the data. Call buf.flush() (or let the buffer be "
                "closed) before reopening; delete the directory to start over."
            )
        return manifest

    def manifest(self, index: Any, sampler: Any, dirty: bool) -> dict[str, Any]:
        """The manifest dict for a buffer's window ``index`` counters and ``sampler`` type."""
        return {
            "format_version": FORMAT_VERSION,
            "kind": "recollect.memmap",
            **self.config,
            "counters": {"t": int(index.t), "t_clear": int(index.t_clear)},
            "sampler": type(sampler).__name__,
            "dirty": dirty,
        }

    def attach(self, buffer: Any) -> None:
        """Restores an existing directory into ``buffer`` (or writes a fresh manifest)."""
        if self.existing is not None:
            self._restore(buffer, self.existing)
        self.flush(buffer)
        storage, sampler, index = buffer._storage, buffer._sampler, buffer._index
        weakref.finalize(buffer, _flush_parts, self, storage, index, sampler, buffer._lock)

    def _restore(self, buffer: Any, manifest: dict[str, Any]) -> None:
        index, counters = buffer._index, manifest["counters"]
        index.t = int(counters["t"])
        index.clear()
        index.t_clear = int(counters["t_clear"])
        if buffer._is_last is not None:
            slots = np.arange(index.lo, index.hi) % buffer.max_length
            is_last = buffer._storage.read_rows(slots)[buffer._is_last]
            index.rebuild(is_last)
        state_path = self.directory / _SAMPLER_FILE
        if state_path.exists() and manifest.get("sampler") == type(buffer._sampler).__name__:
            with np.load(state_path, allow_pickle=False) as data:
                state = {k: data[k] for k in data.files}
            buffer._sampler.load_state_dict(state)

    def flush(self, buffer: Any) -> None:
        """Flushes data to disk and writes the manifest (counters, sampler state)."""
        _flush_parts(self, buffer._storage, buffer._index, buffer._sampler, buffer._lock)

    def _mark_dirty(self, manifest: dict[str, Any]) -> None:
        _write_json(self.manifest_path, {**manifest, "dirty": True})


def _flush_parts(
    persist: MemmapPersistence, storage: Any, index: Any, sampler: Any, lock: Any
) -> None:
    if not persist.directory.is_dir():  # removed under us (e.g. a temporary directory)
        return
    with lock:
        named = storage.named_arrays() if hasattr(storage, "named_arrays") else {}
        arrays = list(named.values()) or list(storage.arrays)
        for array in arrays:
            if isinstance(array, np.memmap):
                array.flush()
        state = sampler.state_dict()
        if state:
            np.savez(
                persist.directory / _SAMPLER_FILE, **{k: np.asarray(v) for k, v in state.items()}
            )
        manifest = persist.manifest(index, sampler, dirty=False)
        _write_json(persist.manifest_path, manifest)
        ring = _memmap_ring(storage)
        if ring is not None:
            ring.on_write = lambda m=manifest: persist._mark_dirty(m)


def _memmap_ring(storage: Any) -> MemmapStorage | None:
    """The memmap ring of ``storage`` (itself or, for frame-stack storage, its inner ring)."""
    inner = getattr(storage, "_inner", storage)
    return inner if isinstance(inner, MemmapStorage) else None
