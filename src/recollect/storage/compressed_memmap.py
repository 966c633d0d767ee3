"""Compressed slots on disk: the values of a memmap buffer's compressed leaf, in files.

:class:`DiskSlots` is :class:`~recollect.storage.compression.compressed.CompressedSlots`
with its arena a :class:`~recollect.storage.disk_arena.DiskArena` (large
append-only blocks of one file, recycled once every value in a block is
overwritten) and its offset/length index two memory-mapped ``.npy`` files.
RAM then holds none of the values: only the pages the OS caches.

Files of leaf ``name`` in the buffer's directory, generation ``g``::

    compressed-<name>.json          {"generation": g, "block_bytes": ..., "dictionary_sha256": ...}
    compressed-<name>-g<g>.blocks   the block file
    compressed-<name>-g<g>-offsets.npy / -lengths.npy   int64 / int32 [num_envs, slots]
    compressed-<name>-g<g>.dict     the zstd dictionary, when one was trained

A new generation is written only when every value is re-encoded (a trained
dictionary, a restored checkpoint); the small json pointer is replaced
atomically after its files are complete, then the old generation is removed.
A crash leaves the old or the new generation whole.

Crash consistency follows the memmap directory's protocol
(:mod:`recollect.buffers.memmap_state`): a value's bytes are written before its
index entry, and a block is recycled only when none of its values is still
indexed, so every step a ``recover=True`` reopen keeps (steps whose slots were
not written since the last flush) points to bytes that were not touched since.
The steps dropped may have torn entries; entries pointing outside the block
file are cleared on reopen, the others keep their blocks until overwritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError, DiskFullError
from recollect.state.npyio import map_npy
from recollect.state.safe_files import create_new, read_regular
from recollect.state.space import create_npy_memmap, disk_full_error
from recollect.storage.compression.codecs import Codec, DictionaryCodec
from recollect.storage.compression.compressed import TUNE_SAMPLE, CompressedSlots, _Index
from recollect.storage.compression.compressed_parts import Encoded, block_bytes, tuned
from recollect.storage.disk_arena import DiskArena, prefetch_items
from recollect.storage.restore_checks import digest

__all__ = ["DiskSlots", "disk_slots_factory", "live_state"]

_COMPRESSED_KEYS = ("compressed_leaves", "compressed_frames")


class DiskSlots(CompressedSlots):
    """One leaf's values ``[num_envs, slots, *shape]``, stored compressed in files.

    Args:
        codec, num_envs, slots, shape, dtype, name: as :class:`CompressedSlots`.
        directory: the buffer's directory.
        reopen: map the files of an existing directory instead of creating them.

    Raises:
        DiskFullError: the disk cannot hold the first blocks or the index files.
        CheckpointError: on reopen, files missing, of another shape, or a
            dictionary whose sha256 differs from the one recorded.
    """

    def __init__(
        self, codec: Codec, num_envs: int, slots: int, shape: tuple[int, ...], dtype: Any,
        name: str, *, directory: Path, reopen: bool = False,
    ) -> None:  # fmt: skip
        self.directory, self._prefix = Path(directory), f"compressed-{name}"
        self._generation = -1
        self._generations: dict[int, Any] = {}
        self._pending_reopen = reopen
        super().__init__(codec, num_envs, slots, shape, dtype, name)
        if reopen:
            self._after_reopen()
        else:
            self._commit()

    # -- files ------------------------------------------------------------------
    def _path(self, generation: int, suffix: str) -> Path:
        return self.directory / f"{self._prefix}-g{generation}{suffix}"

    @property
    def _pointer(self) -> Path:
        return self.directory / f"{self._prefix}.json"

    def _empty_index(self, codec: Codec) -> _Index:
        """A new generation's files (or, the first time on reopen, the current one's)."""
        block = block_bytes(codec, self.size)
        shape = (self.num_envs, self.slots)
        if self._pending_reopen:
            self._pending_reopen = False
            return self._reopened(codec, block, shape)
        generation = max([self._generation, *self._generations]) + 1
        made: list[Path] = []
        try:
            arena = DiskArena(self._path(generation, ".blocks"), block)
            made.append(arena.path)
            path = self._path(generation, "-offsets.npy")
            offsets = create_npy_memmap(path, shape, np.dtype(np.int64))
            made.append(path)
            path = self._path(generation, "-lengths.npy")
            lengths = create_npy_memmap(path, shape, np.dtype(np.int32))
        except BaseException:
            for path in made:
                path.unlink(missing_ok=True)
            raise
        offsets[...] = -1
        self._generations[generation] = (arena, offsets, lengths)
        return _Index(codec, arena, offsets.view(np.ndarray), lengths.view(np.ndarray))

    def _reopened(self, codec: Codec, block: int, shape: tuple[int, int]) -> _Index:
        try:
            pointer = json.loads(read_regular(self._pointer))
            generation = int(pointer["generation"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"cannot reopen {self._pointer}: {err}") from err
        if int(pointer.get("block_bytes", block)) != block:
            raise CheckpointError(
                f"{self._pointer} was written with {pointer.get('block_bytes')}-byte blocks; "
                f"this buffer uses {block}. The directory belongs to another buffer."
            )
        arrays = []
        for suffix, dtype in (("-offsets.npy", np.int64), ("-lengths.npy", np.int32)):
            path = self._path(generation, suffix)
            try:
                array = map_npy(path)
            except CheckpointError:
                raise
            except (OSError, ValueError, EOFError) as err:
                raise CheckpointError(f"cannot reopen {path}: {err}") from err
            if array.shape != shape or array.dtype != dtype:
                raise CheckpointError(
                    f"{path} holds shape {array.shape}, dtype {array.dtype}; expected {shape}, "
                    f"{np.dtype(dtype)}. The directory belongs to another buffer."
                )
            arrays.append(array)
        offsets, lengths = arrays
        arena = DiskArena(self._path(generation, ".blocks"), block, reopen=True)
        arena.rebuild(offsets.view(np.ndarray), lengths.view(np.ndarray))
        sha = pointer.get("dictionary_sha256")
        if sha is not None:
            if not isinstance(codec, DictionaryCodec):
                raise CheckpointError(f"{self._pointer} names a dictionary; codec {codec.name!r}.")
            path = self._path(generation, ".dict")
            try:
                dictionary = read_regular(path)
            except OSError as err:
                raise CheckpointError(f"cannot reopen {path}: {err}") from err
            if digest(dictionary) != sha:
                raise CheckpointError(f"{path} is not the dictionary its values were encoded with.")
            codec = codec.with_dictionary(dictionary)
        self._generation = generation
        self._generations[generation] = (arena, offsets, lengths)
        self._remove_others(generation)
        return _Index(codec, arena, offsets.view(np.ndarray), lengths.view(np.ndarray))

    def _after_reopen(self) -> None:
        """Tunes a reopened dictionary codec on stored values; counts untrained values."""
        index = self._index
        keys = np.flatnonzero(index.offsets.reshape(-1) >= 0)
        if index.codec is not self.codec and len(keys):
            sample = self._decode_keys_raw(index, keys[:TUNE_SAMPLE])
            self._index = index._replace(codec=tuned(index.codec, sample))
        base, self._untrained = self.codec, None
        if index.codec is base and isinstance(base, DictionaryCodec) and base.trains(self.size):
            self._untrained = len(keys) if len(keys) < base.train_values else None

    def _commit(self) -> None:
        """Points the directory at the current index's generation (atomically), then
        removes every other generation's files."""
        generation = next(g for g, v in self._generations.items() if v[0] is self._index.arena)
        dictionary = self.dictionary
        pointer: dict[str, Any] = {
            "generation": generation,
            "block_bytes": self._index.arena.block_bytes,
            "codec": self.codec.name,
        }
        if dictionary is not None:
            path = self._path(generation, ".dict")
            with create_new(path) as f:
                f.write(dictionary)
                f.flush()
                os.fsync(f.fileno())
            pointer["dictionary_sha256"] = digest(dictionary)
        arena, offsets, lengths = self._generations[generation]
        for part in (arena, offsets, lengths):  # the data before the pointer names it
            part.flush()
        tmp = self._pointer.with_suffix(".json.tmp")
        with create_new(tmp) as f:
            f.write(json.dumps(pointer).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._pointer)
        self._generation = generation
        for old in [g for g in self._generations if g != generation]:
            del self._generations[old]  # readers outside the lock keep their own mapping
        self._remove_others(generation)

    def _remove_others(self, generation: int) -> None:
        """Removes the files of every generation but ``generation`` (older ones, or a newer
        one a crash left half-written before its pointer was replaced)."""
        own = f"{self._prefix}-g{generation}"
        for path in self.directory.glob(f"{self._prefix}-g*"):
            if not path.name.startswith(own) or path.name[len(own)] not in ".-":
                path.unlink(missing_ok=True)  # (g1 vs g10: another generation)

    # -- writing ----------------------------------------------------------------
    def reserve(self, values: Any) -> None:
        """Grows the block file for a write of ``values`` (array or :class:`Encoded`)
        before anything is stored.

        Raises:
            DiskFullError: the disk cannot hold them; nothing was changed.
        """
        arena = self._index.arena
        if isinstance(values, Encoded):
            count = values.lengths.size
            current = values.codec is self._index.codec  # else re-encoded: assume the bound
            nbytes = int(values.lengths.sum()) if current else 0
        else:
            count = int(np.prod(np.shape(values)[: np.ndim(values) - len(self.shape)]))
            current, nbytes = False, 0
        if not current:
            nbytes = count * self._index.codec.bound(max(1, self.size))
        assert isinstance(arena, DiskArena)
        arena.reserve(nbytes, count)

    def store(self, rows: np.ndarray | None, slots: Any, values: Any) -> None:
        """As :meth:`CompressedSlots.store`; the block file grows first.

        Raises:
            DiskFullError: the disk cannot hold the values; nothing was changed.
        """
        encoded = self._current(self.encode(values))
        self.reserve(encoded)
        super().store(rows, slots, encoded)

    def _train(self, codec: DictionaryCodec) -> None:
        """Trains as the in-RAM store does, writing the re-encoded values in a new generation;
        a full disk skips the dictionary (the values stay as they are)."""
        try:
            super()._train(codec)
        except DiskFullError:
            self._untrained = None
        except OSError as err:
            if disk_full_error(err, self.directory, 0) is None:
                raise
            self._untrained = None
        self._commit()

    def load_state_dict(self, state: Any, name: str) -> None:
        """As :meth:`CompressedSlots.load_state_dict`, into a new generation of files."""
        try:
            super().load_state_dict(state, name)
        finally:
            self._commit()  # the restored generation, or (on error) the one before

    # -- reading ----------------------------------------------------------------
    def decode_unique(self, keys: np.ndarray, lead: int = 0) -> np.ndarray:
        """As :meth:`CompressedSlots.decode_unique`, after asking the OS for the index
        entries of ``keys`` (:func:`~recollect.storage.disk_arena.prefetch_items`; index
        files of 16 MiB or more)."""
        for arena, offsets, lengths in list(self._generations.values()):
            if arena is self._index.arena:
                prefetch_items(offsets, keys, 8)
                prefetch_items(lengths, keys, 4)
        return super().decode_unique(keys, lead)

    def _decode(
        self,
        index: _Index,
        offsets: np.ndarray,
        lengths: np.ndarray,
        out: np.ndarray,
        before: int | None = None,
    ) -> None:
        """Decodes as the in-RAM compressed slots do, after asking the OS to read every value's
        pages at once (:meth:`DiskArena.prefetch`): cold values arrive in one round of
        concurrent reads instead of one page fault at a time."""
        arena = index.arena
        assert isinstance(arena, DiskArena)
        arena.prefetch(offsets, lengths)
        super()._decode(index, offsets, lengths, out, before)

    # -- state ------------------------------------------------------------------
    @property
    def disk_bytes(self) -> int:
        """Bytes of this leaf's files: the block file, the index and the dictionary."""
        arena = self._index.arena
        assert isinstance(arena, DiskArena)
        index = self._index.offsets.nbytes + self._index.lengths.nbytes
        return arena.disk_bytes + index + len(self.dictionary or b"")

    @property
    def nbytes(self) -> int:
        """Bytes of this leaf's files (what ``buf.nbytes`` counts for memmap storage)."""
        return self.disk_bytes

    def state_dict(self) -> dict[str, Any]:
        """The block file and index as the live memory maps (a memmap flush records them
        by name; a checkpoint copies them, compressed bytes as they are):
        ``{"blocks": uint8 [file], "offsets": int64, "lengths": int32 [num_envs, slots],
        "codec": name}`` plus the dictionary entries of :meth:`CompressedSlots.state_dict`."""
        arena, offsets, lengths = self._generations[self._generation]
        state: dict[str, Any] = {
            "blocks": arena.map,
            "offsets": offsets,
            "lengths": lengths,
            "codec": self.codec.name,
        }
        dictionary = self.dictionary
        if dictionary is not None:
            state["dictionary"] = np.frombuffer(dictionary, np.uint8).copy()
            state["dictionary_sha256"] = digest(dictionary)
        return state

    def flush(self) -> None:
        """Writes the dirty pages of the block file and the index to disk."""
        arena, offsets, lengths = self._generations[self._generation]
        arena.flush()
        offsets.flush()
        lengths.flush()


def disk_slots_factory(directory: Path, reopen: bool) -> Any:
    """``(codec, num_envs, slots, shape, dtype, name) -> DiskSlots`` in ``directory``."""

    def make(
        codec: Codec, num_envs: int, slots: int, shape: tuple[int, ...], dtype: Any, name: str
    ) -> DiskSlots:
        return DiskSlots(
            codec, num_envs, slots, shape, dtype, name, directory=directory, reopen=reopen
        )

    return make


def live_state(state: dict[str, Any]) -> dict[str, Any]:
    """A storage ``state_dict()`` for a memmap directory's own manifest: each compressed
    leaf kept in block files (:class:`DiskSlots`) is replaced by the name of its json
    pointer (the directory's files are the state; a reopen maps them again), so a flush
    copies none of the compressed bytes and never names a generation that a later
    re-encoding removes."""
    out = dict(state)
    for key in _COMPRESSED_KEYS:
        leaves = state.get(key)
        if isinstance(leaves, dict):
            out[key] = {
                name: {"on_disk": f"compressed-{name}.json"} if "blocks" in leaf else leaf
                for name, leaf in leaves.items()
            }
    return out
