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

import math
import threading
from typing import Any, NamedTuple

import numpy as np

from recollect.errors import CheckpointError, StateError
from recollect.storage.arena import ByteArena
from recollect.storage.compression.codecs import Codec, DictionaryCodec
from recollect.storage.compression.compressed_parts import (
    Encoded,
    block_bytes,
    slots_nbytes,
    trim_heap,
    tuned,
)
from recollect.storage.restore_checks import (
    check_dictionary,
    check_lengths,
    check_values,
    damaged,
    digest,
)

__all__ = [
    "CompressedSlots",
    "Encoded",
    "block_bytes",
    "joined_state",
    "slots_nbytes",
    "trim_heap",
    "tuned",
]

#: Values re-encoded per chunk when a dictionary is trained (bounds the decoded copy).
REENCODE_VALUES = 512
#: A trained dictionary is kept only when it shrinks the stored values by this fraction.
MIN_DICTIONARY_GAIN = 0.1
#: Stored values decoded on restore to choose a dictionary codec's encoder options.
TUNE_SAMPLE = 256
#: A thread keeps its decode scratch only up to this size (one ``sample(40_000)`` of 4 KiB
#: values kept 160 MiB for good); a larger read's scratch goes with its result.
SCRATCH_KEEP_BYTES = 16 << 20


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
        codec: the :class:`~recollect.storage.compression.codecs.Codec`. A
            :class:`~recollect.storage.compression.codecs.DictionaryCodec` (zstd) gets a
            dictionary trained on the first ``codec.train_values`` values stored
            (they are then re-encoded with it); a store restored with at least
            that many values and no dictionary keeps none.
        num_envs, slots: the index geometry.
        shape, dtype: one value's shape and dtype.
        name: the leaf's name in messages (``leaf_1``, ``frames_3``: its checkpoint key).

    Writes count themselves in a sequence number (odd while one runs): a read
    outside the lock that fails to decode tells a race (zeros) from damage (raises).
    """

    def __init__(
        self, codec: Codec, num_envs: int, slots: int, shape: tuple[int, ...], dtype: Any,
        name: str = "compressed leaf",
    ) -> None:  # fmt: skip
        self.codec, self.shape, self.dtype = codec, tuple(shape), np.dtype(dtype)
        self.name, self._writes = name, 0  # _writes: odd while a write changes index or arena
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

    def check_written(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Raises CheckpointError unless the values of row ``r`` at times ``[lo[r], hi[r])``
        (slots ``time % slots``; int64 ``[num_envs]`` each) were all written.

        A restored length of -1 marks a value never written: a checkpoint whose stored
        steps include one would sample it as zeros."""
        counts = np.clip(np.asarray(hi, np.int64) - lo, 0, self.slots)
        if not counts.any():
            return
        rows = np.repeat(self._all_rows, counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        times = np.repeat(np.asarray(lo, np.int64), counts) + np.arange(len(rows)) - starts
        slots = times % self.slots
        missing = np.flatnonzero(self._index.offsets[rows, slots] < 0)
        if len(missing):
            first = missing[0]
            raise damaged(
                self.name,
                int(rows[first] * self.slots + slots[first]),
                self.slots,
                f"is never written but holds the stored step at time {int(times[first])} "
                f"({len(missing)} such values)",
            )

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

    def reserve(self, values: Any) -> None:
        """Makes room for a write of ``values`` before it (on disk: grows the block file);
        a RAM store grows while it stores, so nothing to do here."""
        del values

    def flush(self) -> None:
        """Writes dirty pages to disk (files of a store on disk; a no-op in RAM)."""

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

        The scratch array (up to ``SCRATCH_KEEP_BYTES``; larger ones are not kept) is
        reused by this thread's next call: copy what you keep.

        Raises:
            StateError: a value fails to decode and no write ran meanwhile (see :meth:`_decode`).
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

        A gather outside the lock (``Table.is_stale`` protocol) can read a slot
        while a write replaces its bytes; that draw is stale and is drawn again.
        Tolerated only when the write sequence number ``before`` (read before
        the index) was odd or has moved since: no write, no tolerance.

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
            state["dictionary_sha256"] = digest(dictionary)
        return state

    def load_state_dict(self, state: Any, name: str) -> None:
        """Restores :meth:`state_dict` output (bytes copied into fresh blocks).

        Every value is checked first (:mod:`~recollect.storage.restore_checks`):
        one valid frame of the slot size that decodes; the dictionary the one
        whose sha256 was saved (older checkpoints saved none: check skipped).

        Raises:
            CheckpointError: missing entries, another shape, codec or byte count, a
                dictionary this codec cannot use or of another sha256, or a value
                (named by row and slot) that is not one valid encoding of the slot.
        """
        if isinstance(state, dict) and "blocks" in state:
            state = joined_state(state)
        if not isinstance(state, dict) or {"bytes", "lengths"} - set(state):
            raise CheckpointError(f"saved compressed {name} lacks its bytes or lengths.")
        if state.get("codec", self.codec.name) != self.codec.name:
            raise CheckpointError(
                f"saved compressed {name} uses codec {state.get('codec')!r}; this buffer "
                f"uses {self.codec.name!r}."
            )
        data, lengths = np.asarray(state["bytes"]), np.asarray(state["lengths"])
        if (
            lengths.shape != self.offsets.shape
            or lengths.dtype.kind not in "iu"
            or (data.dtype != np.uint8 or data.ndim != 1)
        ):
            raise CheckpointError(
                f"saved compressed {name} has lengths of shape {lengths.shape}, {lengths.dtype} "
                f"and bytes of dtype {data.dtype}; this buffer needs lengths of shape "
                f"{self.offsets.shape}, an int dtype, and uint8 bytes."
            )
        written = lengths >= 0
        check_lengths(lengths, self.codec.bound(max(1, self.size)), name)
        if int(lengths[written].astype(np.int64).sum()) != len(data):
            raise CheckpointError(f"saved compressed {name}: lengths do not add up to its bytes.")
        codec = self._restored_codec(state.get("dictionary"), name)
        check_dictionary(codec, state.get("dictionary_sha256"), name)
        index = self._empty_index(codec)
        offsets = index.arena.append(data, lengths[written].astype(np.int64))
        index.offsets[written] = offsets
        index.lengths[written] = lengths[written]
        check_values(codec, index.arena.data, index.offsets, index.lengths, self.size, name)
        self._index = index  # one swap: a reader outside the lock keeps the version it read
        live = int(np.count_nonzero(written))
        if codec is not self.codec and live:  # a restored dictionary: encode new values alike
            keys = np.flatnonzero(index.offsets.reshape(-1) >= 0)[:TUNE_SAMPLE]
            sample = self._decode_keys_raw(index, keys)
            self._index = _Index(tuned(codec, sample), index.arena, index.offsets, index.lengths)
        base, self._untrained = self.codec, None
        if codec is base and isinstance(base, DictionaryCodec) and base.trains(self.size):
            self._untrained = live if live < base.train_values else None

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


def joined_state(state: dict[str, Any]) -> dict[str, Any]:
    """A disk store's state (``blocks``, ``offsets``, ``lengths``: see
    :meth:`~recollect.storage.compressed_memmap.DiskSlots.state_dict`) in the RAM store's
    form: the stored values' bytes joined in slot order, lengths -1 where never written.

    Raises:
        CheckpointError: the entries are not uint8 blocks and int index arrays of one
            shape, or an entry points outside the blocks.
    """
    blocks = np.asarray(state["blocks"])
    offsets, lengths = np.asarray(state.get("offsets")), np.asarray(state.get("lengths"))
    if (
        blocks.dtype != np.uint8
        or blocks.ndim != 1
        or offsets.shape != lengths.shape
        or offsets.dtype.kind != "i"
        or lengths.dtype.kind != "i"
    ):
        raise CheckpointError(
            "saved compressed blocks must be uint8 [n] with int offsets and lengths of one "
            f"shape; got blocks {blocks.dtype} {blocks.shape}, offsets {offsets.dtype} "
            f"{offsets.shape}, lengths {lengths.dtype} {lengths.shape}."
        )
    flat_off = offsets.reshape(-1).astype(np.int64)
    flat_len = lengths.reshape(-1).astype(np.int64)
    keep = np.flatnonzero(flat_off >= 0)
    ends = flat_off[keep] + flat_len[keep]
    if len(keep) and (int(ends.max()) > len(blocks) or int(flat_len[keep].min()) < 0):
        raise CheckpointError("saved compressed blocks: an index entry points outside them.")
    view = blocks.data  # a memoryview
    joined = b"".join(map(view.__getitem__, map(slice, flat_off[keep].tolist(), ends.tolist())))
    out = {k: v for k, v in state.items() if k not in ("blocks", "offsets")}
    out["bytes"] = np.frombuffer(joined, np.uint8)
    out["lengths"] = np.where(offsets >= 0, lengths, -1).astype(np.int32)
    return out
