"""Compressed slots: one leaf's values, each compressed once, in a block arena.

:class:`CompressedSlots` keeps ``num_envs`` rows of ``slots`` values of one
shape and dtype. Each value is compressed on its own (so any value can be read
back alone) and its bytes are appended to a :class:`~recollect.storage.arena.ByteArena`;
two arrays ``offsets`` int64 and ``lengths`` int32 ``[num_envs, slots]`` index
them (-1 / 0 for a slot never written). Reads decode each distinct value of a
batch once, in one codec call (zstd: threads in C, outside the GIL), then
index the decoded values into the output. Writes may compress first, outside
any lock (:meth:`CompressedSlots.encode` returns an :class:`Encoded`), and
store later (:meth:`CompressedSlots.store`).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from typing import Any, NamedTuple

import numpy as np

from recollect.errors import CheckpointError, StateError
from recollect.storage.arena import ByteArena
from recollect.storage.codecs import Codec, DictionaryCodec

__all__ = ["CompressedSlots", "Encoded", "block_bytes", "slots_nbytes"]

BLOCK_BYTES = 1 << 20
#: Values re-encoded per chunk when a dictionary is trained (bounds the decoded copy).
REENCODE_VALUES = 512
#: A trained dictionary is kept only when it shrinks the stored values by this fraction.
MIN_DICTIONARY_GAIN = 0.1
#: Stored values decoded on restore to choose a dictionary codec's encoder options.
TUNE_SAMPLE = 256
#: A thread keeps its decode scratch between reads only up to this size; a larger read's
#: scratch goes with its result (one ``sample(40_000)`` of 4 KiB values kept 160 MiB).
SCRATCH_KEEP_BYTES = 16 << 20
#: Restored values are decoded (checked) in batches of at most this many bytes.
CHECK_BATCH_BYTES = 16 << 20


def block_bytes(codec: Codec, size: int) -> int:
    """Arena block size for values of ``size`` bytes (at least 4 worst-case values)."""
    return max(BLOCK_BYTES, 4 * codec.bound(max(1, size)))


def slots_nbytes(codec: Codec, values: int, size: int, mean_bytes: float | None = None) -> int:
    """Bytes of :class:`CompressedSlots` holding ``values`` slots of ``size`` bytes.

    Without ``mean_bytes``: what an empty store holds (index and first block).
    With it (measured mean compressed length): a full store, its bytes rounded
    up to whole blocks plus one block being written.
    """
    block = -(-block_bytes(codec, size) // 4096) * 4096
    index = values * (8 + 4)
    if mean_bytes is None:
        return index + block
    return index + (-(-int(values * mean_bytes) // block) + 1) * block


def trim_heap() -> None:
    """Hands freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    glibc keeps freed chunks below its dynamic trim threshold (tens of MB once
    numpy has freed large arrays), so the temporaries of a dictionary training
    would otherwise stay in the process's RSS for good.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (or no CDLL(None): Windows)
        return
    trim(0)


class Encoded:
    """Values already compressed: their bytes joined, int64 ``lengths`` ``[*lead]``, and
    the codec that encoded them (a store re-encodes them if it has changed since)."""

    __slots__ = ("codec", "data", "lengths")

    def __init__(self, data: bytes, lengths: np.ndarray, codec: Codec) -> None:
        self.data, self.lengths, self.codec = data, lengths, codec

    @property
    def shape(self) -> tuple[int, ...]:
        """The leading (env, time) dims of the values: ``lengths.shape``."""
        return self.lengths.shape


class _Index(NamedTuple):
    """Where the values are, and the codec that reads them: replaced as one object when a
    dictionary is trained, so a read outside the lock sees one consistent version."""

    codec: Codec
    arena: ByteArena
    offsets: np.ndarray  # int64 [num_envs, slots], -1: never written
    lengths: np.ndarray  # int32 [num_envs, slots]


class CompressedSlots:
    """One leaf's values ``[num_envs, slots, *shape]``, each stored compressed.

    Args:
        codec: the :class:`~recollect.storage.codecs.Codec`. A
            :class:`~recollect.storage.codecs.DictionaryCodec` (zstd) gets a
            dictionary trained on the first ``codec.train_values`` values stored
            (they are then re-encoded with it); a store restored with at least
            that many values and no dictionary keeps none.
        num_envs, slots: the index geometry.
        shape, dtype: one value's shape and dtype.
        name: the leaf's name in messages (``leaf_1``, ``frames_3``: its checkpoint key).

    A read (:meth:`decode_unique`) may run outside the table lock while a
    write replaces values; writes count themselves in a sequence number (odd
    while a write runs), so a read that fails to decode can tell a race (the
    number moved or was odd: its draw is stale and is drawn again, so it gets
    zeros) from damaged data (no write ran: :class:`~recollect.errors.StateError`).
    """

    def __init__(
        self,
        codec: Codec,
        num_envs: int,
        slots: int,
        shape: tuple[int, ...],
        dtype: Any,
        name: str = "compressed leaf",
    ) -> None:
        self.codec, self.shape, self.dtype = codec, tuple(shape), np.dtype(dtype)
        self.name = name
        self._writes = 0  # sequence number: odd while a write changes the index or arena
        self.num_envs, self.slots = num_envs, slots
        self.size = math.prod(self.shape) * self.dtype.itemsize
        self._index = self._empty_index(codec)
        trains = isinstance(codec, DictionaryCodec) and codec.trains(self.size)
        self._untrained: int | None = 0 if trains else None  # live values, while waiting to train
        self._all_rows = np.arange(num_envs, dtype=np.int64)
        self._scratch = threading.local()  # decoded values of the last read, per thread

    def _empty_index(self, codec: Codec) -> _Index:
        bound = codec.bound(max(1, self.size))
        block = block_bytes(codec, self.size)
        # the worst case (incompressible values) fits without growing; only touched pages count
        arena = ByteArena(self.num_envs * self.slots * bound + (self.num_envs + 2) * block, block)
        offsets = np.full((self.num_envs, self.slots), -1, np.int64)
        return _Index(codec, arena, offsets, np.zeros((self.num_envs, self.slots), np.int32))

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``[num_envs, slots]``: each value's offset in the arena (-1: never written)."""
        return self._index.offsets

    @property
    def lengths(self) -> np.ndarray:
        """int32 ``[num_envs, slots]``: each value's compressed length."""
        return self._index.lengths

    @property
    def arena(self) -> ByteArena:
        """The blocks holding the compressed bytes."""
        return self._index.arena

    @property
    def dictionary(self) -> bytes | None:
        """The trained (or restored) dictionary the values are encoded with, if any."""
        codec = self._index.codec
        return codec.dictionary if isinstance(codec, DictionaryCodec) else None

    @property
    def nbytes(self) -> int:
        """Bytes held: arena blocks handed out, the offset/length index and the dictionary."""
        index = self._index
        extra = len(self.dictionary or b"")
        return index.arena.nbytes + index.offsets.nbytes + index.lengths.nbytes + extra

    @property
    def stored_bytes(self) -> int:
        """Compressed bytes of the values stored now."""
        return int(self.lengths.sum())

    def encode(self, values: Any) -> Encoded:
        """Compresses ``values`` ``[*lead, *shape]`` (the leaf's dtype) one value at a time."""
        if isinstance(values, Encoded):
            return values
        values = np.ascontiguousarray(values, self.dtype)
        lead = values.shape[: values.ndim - len(self.shape)]
        raw = values.reshape(-1).view(np.uint8).reshape(-1, self.size)
        codec = self._index.codec
        data, lengths = codec.encode(raw)
        return Encoded(data, lengths.reshape(lead), codec)

    def _current(self, encoded: Encoded) -> Encoded:
        """``encoded``, re-encoded if a dictionary was trained after it was encoded."""
        if encoded.codec is self._index.codec:
            return encoded
        lengths = encoded.lengths.reshape(-1).astype(np.int64)
        raw = np.empty((len(lengths), self.size), np.uint8)
        data = np.frombuffer(encoded.data, np.uint8)
        encoded.codec.decode_into(data, np.cumsum(lengths) - lengths, lengths, raw)
        values = raw.view(self.dtype).reshape(*encoded.lengths.shape, *self.shape)
        return self.encode(values)

    def store(self, rows: np.ndarray | None, slots: Any, values: Any) -> None:
        """Stores values (array or :class:`Encoded`) at ``(rows, slots)`` (broadcasting).

        ``rows`` None means every row. A block write has ``rows`` ``[k, 1]`` and
        ``slots`` ``[k, T]``.
        """
        encoded = self._current(self.encode(values))
        self._writes += 1  # odd: readers that fail to decode meanwhile are racing this write
        try:
            self._store(rows, slots, encoded)
        finally:
            self._writes += 1

    def _store(self, rows: np.ndarray | None, slots: Any, encoded: Encoded) -> None:
        index = self._index
        lengths = encoded.lengths.reshape(-1)
        if rows is None and np.ndim(slots) == 0:  # every row at one slot: column views
            column = index.offsets[:, int(slots)]
            fresh = np.count_nonzero(column < 0) if self._untrained is not None else 0
            index.arena.release(column)
            column[:] = index.arena.append(encoded.data, lengths)
            index.lengths[:, int(slots)] = lengths
        else:
            rows = self._all_rows if rows is None else rows
            rows, slots = np.broadcast_arrays(rows, np.asarray(slots))
            old = index.offsets[rows, slots].reshape(-1)
            fresh = np.count_nonzero(old < 0) if self._untrained is not None else 0
            index.arena.release(old)
            offsets = index.arena.append(encoded.data, lengths)
            index.offsets[rows, slots] = offsets.reshape(rows.shape)
            index.lengths[rows, slots] = lengths.reshape(rows.shape)
        if self._untrained is not None:
            self._count(int(fresh))

    # -- dictionaries -----------------------------------------------------------
    def _count(self, fresh: int) -> None:
        """Counts newly written slots; trains once there are ``train_values`` of them."""
        codec = self.codec
        self._untrained = (self._untrained or 0) + fresh
        if isinstance(codec, DictionaryCodec) and self._untrained >= codec.train_values:
            self._train(codec)

    def _train(self, codec: DictionaryCodec) -> None:
        """Trains a dictionary on the stored values and re-encodes them all with it; keeps
        it when they shrink by ``MIN_DICTIONARY_GAIN`` (their plain lengths are known)."""
        self._untrained = None  # one try: values after these are like these
        keys = np.flatnonzero(self.offsets.reshape(-1) >= 0)
        sample = self._decode_keys_raw(self._index, keys[: codec.train_values])
        dictionary = codec.train(sample)
        trained = None if dictionary is None else tuned(codec.with_dictionary(dictionary), sample)
        del sample
        if trained is not None:
            new = self._reencoded(trained, keys)
            plain = int(self.lengths.reshape(-1)[keys].astype(np.int64).sum())
            if int(new.lengths.sum()) <= (1 - MIN_DICTIONARY_GAIN) * plain:
                self._index = new  # one swap: readers outside the lock keep the old index
            del new
        trim_heap()  # the training's tens of MB of freed temporaries

    def _reencoded(self, codec: Codec, keys: np.ndarray) -> _Index:
        """A new index (and arena) holding the values at ``keys`` re-encoded with ``codec``."""
        old, new = self._index, self._empty_index(codec)
        for start in range(0, len(keys), REENCODE_VALUES):  # loop over chunks of values
            part = keys[start : start + REENCODE_VALUES]
            data, lengths = codec.encode(self._decode_keys_raw(old, part))
            new.offsets.reshape(-1)[part] = new.arena.append(data, lengths)
            new.lengths.reshape(-1)[part] = lengths
        return new

    def _decode_keys_raw(self, index: _Index, keys: np.ndarray) -> np.ndarray:
        """Raw bytes ``[len(keys), size]`` of the (written) values at flat ``keys``."""
        out = np.empty((len(keys), self.size), np.uint8)
        offsets, lengths = index.offsets.reshape(-1)[keys], index.lengths.reshape(-1)[keys]
        index.codec.decode_into(index.arena.data, offsets, lengths, out)
        return out

    # -- reading ----------------------------------------------------------------
    def decode_keys(self, keys: np.ndarray) -> np.ndarray:
        """Values ``[*keys.shape, *shape]`` at keys ``row * slots + slot``, each decoded once."""
        unique, inverse = np.unique(keys, return_inverse=True)
        table = self.decode_unique(unique)
        return table[inverse.reshape(-1)].reshape(*keys.shape, *self.shape)

    def decode_unique(self, keys: np.ndarray, lead: int = 0) -> np.ndarray:
        """Values at distinct flat keys, zeros where never written, in a per-thread scratch
        array ``[lead + len(keys), *shape]`` (rows ``[:lead]`` left for the caller).

        The scratch array is reused by this thread's next call: copy what you keep.
        Only scratch of up to ``SCRATCH_KEEP_BYTES`` is kept; a larger read gets a
        fresh array that goes when its result does.

        Raises:
            StateError: a stored value fails to decode and no write ran meanwhile
                (damaged data; a read racing a write gets zeros for its stale draw).
        """
        n = lead + len(keys)
        scratch = getattr(self._scratch, "array", None)
        if scratch is None or len(scratch) < n:
            scratch = np.empty((max(n, 64), self.size), np.uint8)
            if scratch.nbytes <= SCRATCH_KEEP_BYTES:  # kept for the next read; larger ones not
                self._scratch.array = scratch
        raw = scratch[lead:n]
        before = self._writes  # read before the index: see _decode
        index = self._index  # one consistent version, even outside the lock
        offsets = index.offsets.reshape(-1)[keys]
        lengths = index.lengths.reshape(-1)[keys]
        written = offsets >= 0
        if written.all():
            self._decode(index, offsets, lengths, raw, before)
        else:
            raw[~written] = 0
            part = np.empty((int(written.sum()), self.size), np.uint8)
            self._decode(index, offsets[written], lengths[written], part, before)
            raw[written] = part
        return scratch[:n].view(self.dtype).reshape(n, *self.shape)

    def _decode(
        self,
        index: _Index,
        offsets: np.ndarray,
        lengths: np.ndarray,
        out: np.ndarray,
        before: int | None = None,
    ) -> None:
        """``codec.decode_into``; raises unless a write raced the read (then zeros for
        the values that fail, the others decoded one by one).

        Every stored value decodes (checked when restored, encoded by us
        otherwise). A gather outside the lock (``Table.is_stale`` protocol) can
        read a slot while a write replaces its bytes; that draw is stale and is
        drawn again, so its values only need to not raise. That is the case
        only when the write sequence number ``before`` (read before the index)
        was odd (a write was running) or has moved since: no write, no tolerance.

        Raises:
            StateError: a value failed to decode and no write ran during the read.
        """
        data, codec = index.arena.data, index.codec
        try:
            codec.decode_into(data, offsets, lengths, out)
        except Exception as err:
            raced = before is not None and (before % 2 == 1 or self._writes != before)
            if not raced:
                raise StateError(
                    f"compressed {self.name}: stored values failed to decode ({err}) and no "
                    "write ran meanwhile, so the data in memory is damaged; reload the buffer "
                    "from a checkpoint."
                ) from err
            for j in range(len(offsets)):  # a stale draw (rare): decode what still decodes
                try:
                    codec.decode_into(data, offsets[j : j + 1], lengths[j : j + 1], out[j : j + 1])
                except Exception:
                    out[j] = 0

    def load(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Values ``[*shape_of(rows, slots), *shape]`` at ``(rows, slots)`` (broadcasting)."""
        return self.decode_keys(np.asarray(rows) * self.slots + np.asarray(slots))

    def clear(self) -> None:
        """Forgets every value (a trained dictionary is kept)."""
        index = self._index
        self._writes += 1
        index.offsets[:] = -1
        index.lengths[:] = 0
        index.arena.clear()
        self._writes += 1
        if self.dictionary is None and isinstance(self.codec, DictionaryCodec):
            self._untrained = 0 if self.codec.trains(self.size) else None

    # -- state ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"bytes": uint8 [total], "lengths": int32 [num_envs, slots], "codec": name}``,
        plus ``"dictionary"`` uint8 and ``"dictionary_sha256"`` (its hex digest, kept in
        the manifest and checked on load) when the values are encoded with one.

        ``bytes`` holds the stored values' compressed bytes back to back in slot
        order (row-major), without the arena's free space.
        """
        index = self._index
        flat_off, flat_len = index.offsets.reshape(-1), index.lengths.reshape(-1).astype(np.int64)
        keep = np.flatnonzero(flat_off >= 0)
        ends = flat_off[keep] + flat_len[keep]
        view = index.arena.data.data  # a memoryview; one join of the segments: no index per byte
        joined = b"".join(map(view.__getitem__, map(slice, flat_off[keep].tolist(), ends.tolist())))
        data = np.frombuffer(joined, np.uint8)
        lengths = np.where(index.offsets >= 0, index.lengths, -1).astype(np.int32)
        state: dict[str, Any] = {"bytes": data, "lengths": lengths, "codec": self.codec.name}
        dictionary = self.dictionary
        if dictionary is not None:
            state["dictionary"] = np.frombuffer(dictionary, np.uint8).copy()
            state["dictionary_sha256"] = hashlib.sha256(dictionary).hexdigest()
        return state

    def load_state_dict(self, state: Any, name: str) -> None:
        """Restores :meth:`state_dict` output (bytes copied into fresh blocks).

        Every stored value is checked before the store changes: its length is
        -1 (never written) or in ``[0, codec.bound(size)]``; a zstd value is
        exactly one frame stating the slot size as its content size (its
        headers read for all values at once); and every value decodes to the
        slot size (batches of ``CHECK_BATCH_BYTES`` through the codec's batch
        decoder). A saved ``dictionary_sha256`` must match the saved
        dictionary; checkpoints written before it was saved carry none and skip
        that check (their values are still decoded with the dictionary).

        Raises:
            CheckpointError: missing entries, another shape, codec or byte count, a
                dictionary this codec cannot use or whose sha256 differs from the saved
                one, or a value (named by row and slot) that is not one valid frame
                of the slot size.
        """
        if not isinstance(state, dict) or {"bytes", "lengths"} - set(state):
            raise CheckpointError(f"saved compressed {name} lacks its bytes or lengths.")
        if state.get("codec", self.codec.name) != self.codec.name:
            raise CheckpointError(
                f"saved compressed {name} uses codec {state.get('codec')!r}; this buffer "
                f"uses {self.codec.name!r}."
            )
        data, lengths = np.asarray(state["bytes"]), np.asarray(state["lengths"])
        if lengths.shape != self.offsets.shape or data.dtype != np.uint8 or data.ndim != 1:
            raise CheckpointError(
                f"saved compressed {name} has lengths of shape {lengths.shape} and bytes of "
                f"dtype {data.dtype}; this buffer needs shape {self.offsets.shape}, uint8."
            )
        written = lengths >= 0
        bound = self.codec.bound(max(1, self.size))
        bad = np.flatnonzero(((lengths < -1) | (lengths > bound)).reshape(-1))
        if len(bad):
            got = int(lengths.reshape(-1)[bad[0]])
            self._damaged(name, int(bad[0]), f"has length {got}; expected -1 or 0 to {bound}")
        if int(lengths[written].astype(np.int64).sum()) != len(data):
            raise CheckpointError(f"saved compressed {name}: lengths do not add up to its bytes.")
        codec = self._restored_codec(state.get("dictionary"), name)
        self._check_dictionary(codec, state.get("dictionary_sha256"), name)
        index = self._empty_index(codec)
        offsets = index.arena.append(data, lengths[written].astype(np.int64))
        index.offsets[written] = offsets
        index.lengths[written] = lengths[written]
        self._check_values(index, name)
        self._writes += 1
        self._index = index
        self._writes += 1
        live = int(np.count_nonzero(written))
        if codec is not self.codec and live:  # a restored dictionary: encode new values alike
            keys = np.flatnonzero(index.offsets.reshape(-1) >= 0)[:TUNE_SAMPLE]
            sample = np.empty((len(keys), self.size), np.uint8)
            self._decode(
                index, index.offsets.reshape(-1)[keys], index.lengths.reshape(-1)[keys], sample
            )
            self._index = _Index(tuned(codec, sample), index.arena, index.offsets, index.lengths)
        base, self._untrained = self.codec, None
        if codec is base and isinstance(base, DictionaryCodec) and base.trains(self.size):
            self._untrained = live if live < base.train_values else None

    def _damaged(self, name: str, key: int, why: str) -> None:
        row, slot = divmod(int(key), self.slots)
        raise CheckpointError(
            f"saved compressed {name}: the value at row {row}, slot {slot} {why}; the "
            "checkpoint is damaged. Restore it from a backup or discard it."
        )

    def _check_dictionary(self, codec: Codec, saved: Any, name: str) -> None:
        """Raises unless the saved ``dictionary_sha256`` (if any) is the dictionary's."""
        if saved is None:  # written before the digest was saved: nothing to compare
            return
        dictionary = codec.dictionary if isinstance(codec, DictionaryCodec) else None
        got = None if dictionary is None else hashlib.sha256(dictionary).hexdigest()
        if got != str(saved):
            raise CheckpointError(
                f"saved compressed {name}: its dictionary has sha256 {got}; the manifest "
                f"expects {saved}. The dictionary file was swapped or damaged; restore the "
                "checkpoint from a backup."
            )

    def _check_values(self, index: _Index, name: str) -> None:
        """Raises unless every written value of ``index`` is one frame that decodes."""
        keys = np.flatnonzero(index.offsets.reshape(-1) >= 0)
        offsets = index.offsets.reshape(-1)[keys]
        lengths = index.lengths.reshape(-1)[keys].astype(np.int64)
        data, codec = index.arena.data, index.codec
        check = getattr(codec, "check_values", None)  # frame layout (zstd), all values at once
        found = None if check is None else check(data, offsets, lengths, self.size)
        if found is not None:
            self._damaged(name, keys[found[0]], found[1])
        chunk = max(1, CHECK_BATCH_BYTES // max(1, self.size))
        out = np.empty((min(chunk, len(keys)), self.size), np.uint8)
        for start in range(0, len(keys), chunk):  # a loop over batches of values
            part = slice(start, start + chunk)
            try:
                codec.decode_into(data, offsets[part], lengths[part], out[: len(keys[part])])
            except Exception:
                for j in range(start, min(start + chunk, len(keys))):  # damaged: find which
                    try:
                        codec.decode_into(data, offsets[j : j + 1], lengths[j : j + 1], out[:1])
                    except Exception as err:
                        self._damaged(name, keys[j], f"fails to decode ({err})")
                self._damaged(name, keys[start], "fails to decode in its batch")

    def _restored_codec(self, dictionary: Any, name: str) -> Codec:
        if dictionary is None:
            return self.codec
        dictionary = np.asarray(dictionary)
        if not isinstance(self.codec, DictionaryCodec):
            raise CheckpointError(
                f"saved compressed {name} was encoded with a dictionary; this buffer's codec "
                f"{self.codec.name!r} takes none."
            )
        if dictionary.dtype != np.uint8 or dictionary.ndim != 1 or not len(dictionary):
            raise CheckpointError(f"saved compressed {name}: its dictionary is not uint8 bytes.")
        return self.codec.with_dictionary(dictionary.tobytes())


def tuned(codec: Codec, values: np.ndarray) -> Codec:
    """``codec.tuned(values)`` for a codec that chooses encoder options on sample values
    (:meth:`~recollect.storage.zstd_codec.ZstdCodec.tuned`); any other codec as it is."""
    tune = getattr(codec, "tuned", None)
    return codec if tune is None else tune(values)
