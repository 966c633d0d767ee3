"""A shard's insert counters on disk (``<table>/shard-<k>.counters``), checked on every open.

The file holds five int64 words, memory-mapped and written on every insert::

    [MAGIC, inserts, lost_steps, inserts ^ KEY, lost_steps ^ KEY]

``inserts`` is the table's insert count at the last write, ``lost_steps`` the
steps inserted after a checkpoint and lost with the process that held them.
Each value is followed by a mirror (the value XOR a key), so a damaged file
raises :class:`~recollect.errors.CheckpointError` like every other checkpoint
file instead of giving a negative or absurd ``lost_steps``. ``lost_steps`` is
written only when the shard opens, by replacing the whole file atomically, so
its mirror must match exactly. ``inserts`` is written in place (two stores): a
process killed between them leaves the two words one insert apart, so they
may differ by at most :data:`MAX_TORN` (any real insert is far smaller, any
random damage far larger), and ``inserts`` must not be negative.

A file of two words (``[inserts, lost_steps]``, recollect before this layout)
is read when both are non-negative and rewritten in this layout.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import numpy as np

from recollect.errors import CheckpointError

__all__ = ["InsertCounters", "open_counters"]

MAGIC = 0x31544E43_4C4F4352  # "RCOLCNT1" read as a little-endian int64
KEY = 0x5A5A_A5A5_0F0F_F0F0
MAX_TORN = 1 << 32
_WORDS = 5
_LEGACY_WORDS = 2


class InsertCounters:
    """``[inserts, lost_steps]`` of one shard, in memory or in a memory-mapped file.

    Args:
        words: int64 ``[5]`` in the layout above (None: in memory, all zero).
    """

    def __init__(self, words: np.ndarray | None = None) -> None:
        if words is None:
            words = _layout(0, 0)
        self._words = words

    @property
    def inserts(self) -> int:
        """The table's insert count at the last :meth:`set_inserts`."""
        return int(self._words[1])

    @property
    def lost_steps(self) -> int:
        """Steps inserted after a checkpoint and lost when the shard's process died."""
        return int(self._words[2])

    def set_inserts(self, inserts: int) -> None:
        """Records the table's insert count (two stores into the mapped page)."""
        self._words[1] = inserts
        self._words[3] = inserts ^ KEY


def _layout(inserts: int, lost: int) -> np.ndarray:
    return np.array([MAGIC, inserts, lost, inserts ^ KEY, lost ^ KEY], np.int64)


def _damaged(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: {what}; the shard's insert counters are damaged. Restore the file from a "
        "backup, or delete it to count lost_steps from 0 again."
    )


def _read(path: Path) -> tuple[int, int] | None:
    """``(inserts, lost_steps)`` stored in ``path``, or None when there is no file.

    Raises:
        CheckpointError: the file is not a counters file or fails its checks.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _damaged(path, f"cannot be read ({err})") from err
    if len(raw) not in (8 * _WORDS, 8 * _LEGACY_WORDS):
        raise _damaged(
            path, f"holds {len(raw)} bytes, expected {8 * _WORDS} (or {8 * _LEGACY_WORDS})"
        )
    words = np.frombuffer(raw, np.int64)
    if len(words) == _LEGACY_WORDS:
        inserts, lost = int(words[0]), int(words[1])
        if inserts < 0 or lost < 0:
            raise _damaged(path, f"negative counts (inserts {inserts}, lost steps {lost})")
        return inserts, lost
    magic, inserts, lost, inserts_mirror, lost_mirror = (int(w) for w in words)
    if magic != MAGIC:
        raise _damaged(path, f"no counters header (word 0 is {magic:#x})")
    if lost < 0 or lost != lost_mirror ^ KEY:
        raise _damaged(path, f"lost steps {lost} do not match their check word")
    if inserts < 0 or abs(inserts - (inserts_mirror ^ KEY)) > MAX_TORN:
        raise _damaged(path, f"inserts {inserts} do not match their check word")
    return inserts, lost


def _replace(path: Path, words: np.ndarray) -> None:
    """Writes ``words`` to ``path`` atomically (a sibling file, fsynced, renamed)."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(words.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def open_counters(path: Path, restored_inserts: int) -> InsertCounters:
    """The counters of a shard opening with ``restored_inserts`` from its checkpoint.

    The inserts counted after that checkpoint (file's ``inserts`` minus
    ``restored_inserts``) are added to ``lost_steps``; the file is then
    rewritten (atomically) with ``inserts = restored_inserts`` and mapped.

    Raises:
        CheckpointError: the file exists and is damaged (the message names it).
    """
    stored = _read(path)
    inserts, lost = (0, 0) if stored is None else stored
    lost += max(inserts - restored_inserts, 0)
    _replace(path, _layout(restored_inserts, lost))
    return InsertCounters(np.memmap(path, np.int64, "r+", shape=(_WORDS,)))
