"""TF-Agents' single deterministic pass over a ``TFUniformReplayBuffer``: row by row, oldest first.

The order and windowing are those of TF-Agents'
``TFUniformReplayBuffer.as_dataset(single_deterministic_pass=True)``:

- ``sample_batch_size=None``: row 0's stored steps oldest first, then row 1's,
  ...; with ``num_steps`` the steps of a row are cut into windows of
  ``num_steps`` starting every ``window_shift`` steps (``num_steps`` when
  None: no overlap). A row's last window may be shorter unless
  ``drop_remainder`` (then the time axis is static).
- ``sample_batch_size=B``: the rows are taken in groups of ``B`` (the last
  group may be smaller unless ``drop_remainder``); each group yields its
  steps oldest first as ``[G]`` elements, or its full windows as ``[G, num_steps]``
  (a partial window is always dropped here, as in TF-Agents).

Elements are ``(items, BufferInfo(ids, ()))``: ids of every step, no
probabilities (as TF-Agents). The windows are listed when an iterator is
created; adding to or clearing the buffer during the pass makes a read of an
overwritten window raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import tensorflow as tf

from recollect.adapters.tf_data.single_pass import gather_listed
from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import BufferInfo
from recollect.errors import InvalidArgumentError

__all__ = ["check_drop_remainder", "deterministic_pass", "list_windows"]


def check_drop_remainder(
    sample_batch_size: int | None, num_steps: int | None, batch_size: int, max_length: int
) -> None:
    """TF-Agents' check: with ``dataset_drop_remainder`` no data may be dropped entirely.

    Raises:
        InvalidArgumentError (a ValueError): ``sample_batch_size`` > ``batch_size``
            or ``num_steps`` > ``max_length``.
    """
    if sample_batch_size is not None and sample_batch_size > batch_size:
        raise InvalidArgumentError(
            f"sample_batch_size ({sample_batch_size}) > batch_size ({batch_size}) and "
            "dataset_drop_remainder is True. In this case, ALL data will be dropped by the "
            "deterministic dataset; use a smaller sample_batch_size."
        )
    if num_steps is not None and num_steps > max_length:
        raise InvalidArgumentError(
            f"num_steps ({num_steps}) > max_length ({max_length}) and dataset_drop_remainder "
            "is True. In this case, ALL data will be dropped by the deterministic dataset; "
            "use a smaller num_steps."
        )


def list_windows(
    lo: np.ndarray,
    hi: np.ndarray,
    sample_batch_size: int | None,
    num_steps: int | None,
    drop_remainder: bool,
    window_shift: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pass's elements: ``(rows [E, G], counts [E], starts [E], lengths [E])``.

    Element ``e`` holds rows ``rows[e, :counts[e]]`` from step time
    ``starts[e]`` for ``lengths[e]`` steps. ``lo``/``hi`` are each row's
    oldest stored step time and one past its newest.
    """
    num_rows = len(lo)
    group = 1 if sample_batch_size is None else sample_batch_size
    firsts = np.arange(0, num_rows, group)
    counts = np.minimum(group, num_rows - firsts)
    if drop_remainder:
        firsts, counts = firsts[counts == group], counts[counts == group]
    steps = 1 if num_steps is None else num_steps
    shift = steps if window_shift is None or num_steps is None else window_shift
    keep_partial = sample_batch_size is None and not drop_remainder and num_steps is not None
    out_rows, out_counts, out_starts, out_lengths = [], [], [], []
    for first, count in zip(firsts.tolist(), counts.tolist(), strict=True):  # row groups
        start = int(lo[first : first + count].max())
        stored = max(0, int(hi[first : first + count].min()) - start)
        offsets = np.arange(0, stored, shift, dtype=np.int64)
        lengths = np.minimum(steps, stored - offsets)
        if not keep_partial:
            offsets, lengths = offsets[lengths == steps], lengths[lengths == steps]
        rows = np.zeros(group, np.int64)
        rows[:count] = np.arange(first, first + count)
        out_rows.append(np.broadcast_to(rows, (len(offsets), group)))
        out_counts.append(np.full(len(offsets), count, np.int64))
        out_starts.append(start + offsets)
        out_lengths.append(lengths)
    if not out_rows:
        return (
            np.zeros((0, group), np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    return (
        np.concatenate(out_rows),
        np.concatenate(out_counts),
        np.concatenate(out_starts),
        np.concatenate(out_lengths),
    )


def deterministic_pass(
    buffer: ReplayBuffer,
    sample_batch_size: int | None,
    num_steps: int | None,
    num_parallel_calls: int | None,
    drop_remainder: bool,
    window_shift: int | None,
    empty_error: Callable[[str], Exception],
) -> tf.data.Dataset:
    """The dataset of one pass (see the module docstring).

    Raises (while iterating):
        ``empty_error(message)``: nothing is stored when the iterator is created.
        NotEnoughDataError: a listed window was overwritten or cleared before it was read.
    """
    flat, table = buffer.writer.flat_spec, buffer.table

    def windows_numpy() -> list[np.ndarray]:
        with table.lock:
            lo, hi = table.index.lo, table.index.hi
        if not (hi > lo).any():
            raise empty_error(
                "TFUniformReplayBuffer is empty. Make sure to add items before asking the "
                "buffer for data (single_deterministic_pass=True)."
            )
        return list(
            list_windows(lo, hi, sample_batch_size, num_steps, drop_remainder, window_shift)
        )

    def gather_numpy(rows: np.ndarray, count: Any, start: Any, length: Any) -> list[np.ndarray]:
        rows = rows[: int(count)]
        times = np.full(len(rows), int(start), np.int64)
        probs = np.ones(len(rows))
        sample = gather_listed(
            buffer.reader, rows, times, probs, int(length), num_steps is not None
        )
        ids = sample.ids if num_steps is None else sample.ids[:, None] + np.arange(int(length))
        out = cast(list[np.ndarray], [*flat.treedef.flatten_up_to(sample.data), ids])
        return [x[0] for x in out] if sample_batch_size is None else out

    batch = [] if sample_batch_size is None else [sample_batch_size if drop_remainder else None]
    steps: list[int | None] = []
    if num_steps is not None:
        full = sample_batch_size is not None or drop_remainder
        steps = [num_steps if full else None]
    dtypes = [tf.as_dtype(d) for d in flat.dtypes] + [tf.int64]
    shapes = [[*batch, *steps, *s] for s in flat.shapes] + [[*batch, *steps]]

    def windows(_: Any) -> tf.data.Dataset:
        out = tf.numpy_function(windows_numpy, [], [tf.int64] * 4, stateful=True)
        rows = tf.ensure_shape(out[0], [None, sample_batch_size or 1])
        return tf.data.Dataset.from_tensor_slices(
            (rows, *(tf.ensure_shape(x, [None]) for x in out[1:]))
        )

    def gather(rows: Any, count: Any, start: Any, length: Any) -> tuple[Any, BufferInfo]:
        out = tf.numpy_function(gather_numpy, [rows, count, start, length], dtypes, stateful=True)
        for tensor, shape in zip(out, shapes, strict=True):
            tensor.set_shape(shape)
        return flat.unflatten(out[:-1]), BufferInfo(out[-1], ())

    dataset = tf.data.Dataset.range(1).flat_map(windows)
    return dataset.map(gather, num_parallel_calls=num_parallel_calls)
