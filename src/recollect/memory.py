"""Memory estimates: how many bytes a buffer allocates, known before allocating.

:func:`estimate_memory` gives the bytes a :class:`~recollect.ReplayBuffer`
with the same arguments allocates for its steps (``buf.nbytes`` after
construction reports the same number). A RAM buffer (``storage="numpy"``)
larger than the memory the kernel reports available (``MemAvailable`` of
``/proc/meminfo``) is refused at construction with
:class:`~recollect.errors.InsufficientMemoryError` instead of dying later in the
middle of a run; ``storage="memmap"`` or ``force=True`` go ahead.

Compressed leaves (``compression=``) cannot be known before data arrives:
without ``sample_steps`` the estimate is what an empty buffer holds (offset
index and one arena block per leaf); with ``sample_steps`` (a few real steps)
the values are compressed and their mean length estimates a full buffer.
``buf.nbytes`` then measures the blocks actually in use.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, overload

import numpy as np

from recollect.arguments import positive_int
from recollect.errors import InsufficientMemoryError, InvalidArgumentError
from recollect.samplers.windows import WindowIndex
from recollect.specs import FlatSpec
from recollect.storage.compression.codecs import DictionaryCodec
from recollect.storage.compression.compressed import MIN_DICTIONARY_GAIN, slots_nbytes, tuned
from recollect.storage.factory import STORAGES, check_storage, resolve_compression
from recollect.storage.frames.frame_store import (
    frame_store_nbytes,
    resolve_frame_stacks,
    stack_ring,
)
from recollect.validation import check_structure

#: sample values needed for a dictionary-aware estimate (half train, half measure)
DICTIONARY_SAMPLES = 64

__all__ = [
    "STORAGES",
    "MemoryEstimate",
    "available_memory",
    "check_memory",
    "estimate_memory",
    "table_nbytes",
]


class MemoryEstimate(NamedTuple):
    """Bytes of a buffer by where they live (``estimate_memory(..., separate=True)``).

    Attributes:
        ram: bytes allocated in RAM (everything for ``storage="numpy"``; the table for
            ``"memmap"``: window index and sampler arrays).
        disk: bytes of the memmap directory's files (leaf files, frame rings and, for
            compressed leaves, their offset index and block files); 0 for ``"numpy"``.
            The OS caches the pages in use, which RSS counts as file-backed, not anonymous.
    """

    ram: int
    disk: int


@overload
def estimate_memory(
    spec: Any, capacity: int, num_envs: int = ..., storage: str = ..., *,
    frame_stacks: dict[str, Any] | None = ..., sampler: Any = ...,
    track_times_sampled: bool = ..., compression: dict[str, Any] | None = ...,
    sample_steps: Any = ..., separate: Literal[False] = ...,
) -> int: ...  # fmt: skip


@overload
def estimate_memory(
    spec: Any, capacity: int, num_envs: int = ..., storage: str = ..., *,
    frame_stacks: dict[str, Any] | None = ..., sampler: Any = ...,
    track_times_sampled: bool = ..., compression: dict[str, Any] | None = ...,
    sample_steps: Any = ..., separate: Literal[True],
) -> MemoryEstimate: ...  # fmt: skip


def estimate_memory(
    spec: Any,
    capacity: int,
    num_envs: int = 1,
    storage: str = "numpy",
    *,
    frame_stacks: dict[str, Any] | None = None,
    sampler: Any = None,
    track_times_sampled: bool = False,
    compression: dict[str, Any] | None = None,
    sample_steps: Any = None,
    separate: bool = False,
) -> int | MemoryEstimate:
    """Bytes a buffer with these arguments allocates: its steps plus its table.

    The table's bookkeeping is the window index (clocks and an int64
    episode-end log that grows with the episode ends stored: up to 16 bytes
    per stored end, not counted here), the sampler's arrays (prioritized: a
    float64 sum tree and a validity flag, about 9.5 bytes per slot) and, with
    ``track_times_sampled``, an int32 count per slot. For ``storage="numpy"``
    everything lives in RAM; for ``"memmap"`` the steps live in files (RAM then
    holds only the pages in use) and the table in RAM.

    Args:
        spec: the data spec of one step.
        capacity: total steps (a multiple of ``num_envs``).
        num_envs: env rows.
        storage: ``"numpy"`` or ``"memmap"``.
        frame_stacks: ``{leaf path: FrameStack}`` as passed to the buffer;
            those leaves cost one frame per step (plus ``stack_size - 1`` frames
            and one uint8 per row slot of bookkeeping).
        sampler: the sampler passed to the buffer (default uniform: no arrays).
        track_times_sampled: as passed to the buffer.
        compression: ``{leaf path: codec}`` as passed to the buffer. Without
            ``sample_steps`` a compressed leaf counts what an empty buffer
            holds: its offset index (12 bytes per slot) and one arena block.
        sample_steps: a nest of representative steps, leaves ``[n, *shape]``
            (e.g. a few ``add_batch`` inputs of real observations): each compressed
            leaf's values (the newest frame, for frame stacks) are compressed
            and the mean length estimates a full buffer's arena. A zstd leaf of a
            buffer large enough to train a dictionary counts it when ``n >= 64``
            (half of the values train one, the other half measure it); with fewer
            the estimate is an upper bound (the values without a dictionary).
            With ``storage="memmap"`` compressed values live in block files of
            the directory (disk), not in RAM.
        separate: return a :class:`MemoryEstimate` ``(ram, disk)`` instead of the total.

    Returns:
        int bytes; equals ``buf.nbytes`` of the constructed (empty) buffer
        (``buf.storage.nbytes + buf.table.nbytes``). With ``separate``: the same
        bytes split into RAM and disk.

    Raises:
        InvalidArgumentError: unknown storage, or capacity not a positive
            multiple of ``num_envs``.
        SpecError: malformed spec or frame stacks.

    Example:
        >>> spec = {"observation": ArraySpec((84, 84, 4), np.uint8)}
        >>> estimate_memory(spec, 1_000_000, 8)
        28232000384
    """
    check_storage(storage)
    capacity = positive_int("capacity", capacity)
    num_envs = positive_int("num_envs", num_envs)
    if capacity % num_envs:
        raise InvalidArgumentError(
            f"`capacity` must be a positive multiple of `num_envs`; got capacity={capacity}, "
            f"num_envs={num_envs}."
        )
    flat = FlatSpec(spec)
    max_length = capacity // num_envs
    stacks = resolve_frame_stacks(flat, frame_stacks)
    table = table_nbytes(num_envs, max_length, sampler, track_times_sampled)
    codecs = resolve_compression(flat, compression, storage)
    if stacks:
        total = table + frame_store_nbytes(flat, num_envs, max_length, stacks, set(codecs))
    else:
        raw = [leaf.nbytes for i, leaf in enumerate(flat.leaves) if i not in codecs]
        total = table + capacity * sum(raw)
    samples = None
    if sample_steps is not None:
        samples = check_structure(flat, sample_steps, "sample_steps")
    for i, codec in codecs.items():
        leaf = flat.leaves[i]
        values, size = capacity, leaf.nbytes
        if i in stacks:
            values = num_envs * stack_ring(flat, max_length, stacks)
            size //= stacks[i].stack_size
        mean = None
        if samples is not None:
            given = np.asarray(samples[i], leaf.dtype).reshape(-1, *leaf.shape)
            mean = _mean_compressed(codec, given, leaf, stacks.get(i), values)
        total += slots_nbytes(codec, values, size, mean)
    if not separate:
        return total
    if storage == "numpy":
        return MemoryEstimate(total, 0)
    return MemoryEstimate(table, total - table)


def _mean_compressed(codec: Any, values: np.ndarray, leaf: Any, stack: Any, stored: int) -> float:
    """Mean compressed length of the values (newest frames) in ``values`` ``[n, *shape]``
    in a store of ``stored`` values.

    A store that will train a zstd dictionary (``stored >= train_values``) keeps it when it
    shrinks the values by ``MIN_DICTIONARY_GAIN`` or more; with at least
    ``DICTIONARY_SAMPLES`` sample values, a dictionary trained on their first half is
    measured on the second half (values it was not trained on), and the mean scaled by the
    ratio it gives."""
    if stack is not None:
        axis = stack.axis % len(leaf.shape)
        values = np.take(values, stack.stack_size - 1, axis=1 + axis)
    raw = np.ascontiguousarray(values).reshape(len(values), -1).view(np.uint8)
    _, lengths = codec.encode(raw)
    mean = float(lengths.mean())
    trains = isinstance(codec, DictionaryCodec) and codec.trains(raw.shape[1])
    if not (trains and stored >= codec.train_values and len(raw) >= DICTIONARY_SAMPLES):
        return mean
    half = len(raw) // 2
    dictionary = codec.train(raw[:half])
    if dictionary is None:
        return mean
    plain = float(lengths[half:].sum())
    trained = tuned(codec.with_dictionary(dictionary), raw[:half])
    _, with_dictionary = trained.encode(raw[half:])
    ratio = float(with_dictionary.sum()) / max(plain, 1.0)
    return mean * ratio if ratio <= 1 - MIN_DICTIONARY_GAIN else mean


def table_nbytes(num_envs: int, max_length: int, sampler: Any, track_times_sampled: bool) -> int:
    """Bytes a table allocates (``Table.nbytes``): window index, sampler arrays, counts."""
    sampler_bytes = 0 if sampler is None else sampler.estimate_nbytes(num_envs, max_length)
    counts = 4 * num_envs * max_length if track_times_sampled else 0
    return WindowIndex.estimate_nbytes(num_envs, max_length) + sampler_bytes + counts


def available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(nbytes: int, storage: str, force: bool) -> None:
    """Refuses a RAM allocation of ``nbytes`` larger than the available memory.

    Raises:
        InsufficientMemoryError: ``storage == "numpy"``, not ``force`` and
            ``nbytes`` > ``MemAvailable``.
    """
    if force or storage != "numpy":
        return
    available = available_memory()
    if available is not None and nbytes > available:
        raise InsufficientMemoryError(
            f"this buffer needs {nbytes / 2**30:.2f} GiB of RAM but only "
            f"{available / 2**30:.2f} GiB are available (MemAvailable). Use "
            "storage='memmap' with a directory (data on disk), frame_stacks for stacked image "
            "observations, a smaller capacity, or force=True to allocate anyway."
        )
