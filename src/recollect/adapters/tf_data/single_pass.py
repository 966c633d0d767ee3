"""tf.data's single deterministic pass: every window a local buffer stores, read once.

What ``as_dataset(buffer, single_deterministic_pass=True)`` returns: the
windows stored when the iterator is created, listed under the buffer lock
(ordered by start time, then env row) and gathered in batches; a window
overwritten or cleared before it is read raises NotEnoughDataError.
"""

from __future__ import annotations

from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from recollect.buffers.sample import BufferInfo, Sample
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.extras import missing_extra
from recollect.specs import FlatSpec
from recollect.table import Draw, Table

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_data") from None

__all__ = ["WindowedBuffer", "gather_listed", "single_pass_dataset"]


@runtime_checkable
class WindowedBuffer(Protocol):
    """A source that can enumerate its stored windows: its table's index lists them and
    ``gather`` reads a draw of them (a :class:`~recollect.ReplayBuffer`)."""

    @property
    def flat_spec(self) -> FlatSpec:
        """The flattened spec."""
        ...

    @property
    def table(self) -> Table:
        """The buffer's table (index, lock, draws)."""
        ...

    def gather(self, draw: Draw) -> Sample:
        """The sample of a draw."""
        ...


def gather_listed(
    buffer: WindowedBuffer,
    rows: np.ndarray,
    times: np.ndarray,
    probabilities: np.ndarray,
    num_steps: int,
    time_axis: bool,
) -> Sample:
    """The windows of ``num_steps`` steps at env ``rows`` and start ``times`` (int64
    ``[k]``) listed earlier for a single deterministic pass, gathered under the table's
    lock (``probabilities`` float64 ``[k]`` become the sample's; ``time_axis``: keep the
    time axis of one-step windows).

    Raises:
        NotEnoughDataError: a listed window was overwritten or cleared since.
    """
    table = buffer.table
    with table.lock:
        if table.index.stale(rows, times):
            raise NotEnoughDataError(
                "windows listed for this single deterministic pass were overwritten or "
                "cleared before they were read; do not add to or clear the buffer during "
                "the pass, or restart the iterator."
            )
        draw = table.make_draw(rows, times, probabilities, num_steps, time_axis=time_axis)
        return buffer.gather(draw)


def single_pass_dataset(
    buffer: Any,
    sample_batch_size: int | None,
    num_steps: int | None,
    num_parallel_calls: int | None,
) -> tf.data.Dataset:
    """Every valid window stored now, once, ordered by start time then env row (see
    ``as_dataset(single_deterministic_pass=True)``).

    Raises:
        InvalidArgumentError: ``buffer`` cannot enumerate its windows (it is not a
            :class:`~recollect.ReplayBuffer`).
    """
    if not isinstance(buffer, WindowedBuffer):
        raise InvalidArgumentError(
            "single_deterministic_pass=True needs a recollect.ReplayBuffer (it enumerates the "
            f"stored windows); got {type(buffer).__name__}. Use sampling mode instead."
        )
    flat, table = buffer.flat_spec, buffer.table
    n, within = table.resolve_window(num_steps)

    def windows_numpy() -> list[np.ndarray]:
        with table.lock:
            segments = table.index.segments(n, within)
            rows, times = segments.enumerate()
        probability = np.full(len(rows), 1.0 / max(segments.total, 1))
        return [rows, times, probability]

    def gather_numpy(rows: np.ndarray, times: np.ndarray, probs: np.ndarray) -> list[np.ndarray]:
        single = rows.ndim == 0
        rows, times, probs = (np.atleast_1d(x) for x in (rows, times, probs))
        sample = gather_listed(buffer, rows, times, probs, n, time_axis=num_steps is not None)
        out = cast(
            list[np.ndarray],
            [*flat.treedef.flatten_up_to(sample.data), sample.ids, sample.probabilities],
        )
        return [x[0] for x in out] if single else out

    inner = [num_steps] if num_steps is not None else []
    batch = [] if sample_batch_size is None else [None]
    dtypes = [tf.as_dtype(d) for d in flat.dtypes] + [tf.int64, tf.float64]
    shapes = [[*batch, *inner, *s] for s in flat.shapes] + [batch, batch]

    def windows(_: Any) -> tf.data.Dataset:
        rows, times, probs = tf.numpy_function(windows_numpy, [], [tf.int64, tf.int64, tf.float64])
        return tf.data.Dataset.from_tensor_slices(
            tuple(tf.ensure_shape(x, [None]) for x in (rows, times, probs))
        )

    def gather(rows: Any, times: Any, probs: Any) -> tuple[Any, BufferInfo]:
        out = tf.numpy_function(gather_numpy, [rows, times, probs], dtypes, stateful=True)
        for tensor, shape in zip(out, shapes, strict=True):
            tensor.set_shape(shape)
        return flat.unflatten(out[:-2]), BufferInfo(out[-2], out[-1])

    dataset = tf.data.Dataset.range(1).flat_map(windows)
    if sample_batch_size is not None:
        dataset = dataset.batch(sample_batch_size)
    return dataset.map(gather, num_parallel_calls=num_parallel_calls)
