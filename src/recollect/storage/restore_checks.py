"""Checks of a compressed leaf's saved values before a store takes them (checkpoint load).

The manifest's checksums carry no key: a damaged checkpoint can be signed
again, so a load checks what it restores. Each saved length is -1 (never
written) or at most the codec's bound; the dictionary is the one whose sha256
was saved beside it; and every value is one valid encoding of exactly one slot:
for zstd, its frame layout is read for all values at once
(:func:`~recollect.storage.compression.zstd_frames.check_frames`: one frame, stating the
slot size as its content size, so a 64 MiB bomb is never decoded), then every
value is decoded in batches of ``CHECK_BATCH_BYTES`` through the codec's batch
decoder (100,000 zstd values of 84x84 bytes: about 10 ms for the frames, 50 ms
for the decode). Each failure is a :class:`~recollect.errors.CheckpointError`
naming the leaf and the value's row and slot.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.storage.compression.codecs import Codec, DictionaryCodec

__all__ = ["check_dictionary", "check_lengths", "check_values", "digest"]

#: Restored values are decoded (checked) in batches of at most this many bytes.
CHECK_BATCH_BYTES = 16 << 20


def digest(dictionary: bytes) -> str:
    """The hex sha256 of a dictionary, as saved in the manifest."""
    return hashlib.sha256(dictionary).hexdigest()


def damaged(name: str, key: int, slots: int, why: str) -> CheckpointError:
    """The error for the value at flat ``key`` (``row * slots + slot``) of leaf ``name``."""
    row, slot = divmod(int(key), slots)
    return CheckpointError(
        f"saved compressed {name}: the value at row {row}, slot {slot} {why}; the "
        "checkpoint is damaged. Restore it from a backup or discard it."
    )


def check_lengths(lengths: np.ndarray, bound: int, name: str) -> None:
    """Raises unless every length of ``lengths`` int ``[num_envs, slots]`` is -1 or in
    ``[0, bound]``."""
    bad = np.flatnonzero(((lengths < -1) | (lengths > bound)).reshape(-1))
    if len(bad):
        got = int(lengths.reshape(-1)[bad[0]])
        why = f"has length {got}; expected -1 or 0 to {bound}"
        raise damaged(name, int(bad[0]), lengths.shape[1], why)


def check_dictionary(codec: Codec, saved: Any, name: str) -> None:
    """Raises unless the saved ``dictionary_sha256`` is the digest of ``codec``'s dictionary.

    Checkpoints written before the digest was saved have none (``saved`` None):
    that check is skipped; their values are still decoded with the dictionary.
    """
    if saved is None:
        return
    dictionary = codec.dictionary if isinstance(codec, DictionaryCodec) else None
    got = None if dictionary is None else digest(dictionary)
    if got != str(saved):
        raise CheckpointError(
            f"saved compressed {name}: its dictionary has sha256 {got}; the manifest "
            f"expects {saved}. The dictionary file was swapped or damaged; restore the "
            "checkpoint from a backup."
        )


def check_values(
    codec: Codec, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, size: int, name: str
) -> None:
    """Raises unless every written value (``offsets`` >= 0, int ``[num_envs, slots]``
    into ``data`` uint8) is one valid encoding of ``size`` bytes."""
    slots = offsets.shape[1]
    keys = np.flatnonzero(offsets.reshape(-1) >= 0)
    offs = offsets.reshape(-1)[keys]
    lens = lengths.reshape(-1)[keys].astype(np.int64)
    check = getattr(codec, "check_values", None)  # frame layout (zstd), all values at once
    found = None if check is None else check(data, offs, lens, size)
    if found is not None:
        raise damaged(name, keys[found[0]], slots, found[1])
    chunk = max(1, CHECK_BATCH_BYTES // max(1, size))
    out = np.empty((min(chunk, len(keys)), size), np.uint8)
    for start in range(0, len(keys), chunk):  # a loop over batches of values
        part = slice(start, start + chunk)
        try:
            codec.decode_into(data, offs[part], lens[part], out[: len(keys[part])])
        except Exception:
            for j in range(start, min(start + chunk, len(keys))):  # damaged: find which
                try:
                    codec.decode_into(data, offs[j : j + 1], lens[j : j + 1], out[:1])
                except Exception as err:
                    raise damaged(name, keys[j], slots, f"fails to decode ({err})") from err
            raise damaged(name, keys[start], slots, "fails to decode in its batch") from None
