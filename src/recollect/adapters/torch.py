"""PyTorch adapter: sample nests as ``torch.Tensor`` nests (torch imported lazily).

On CPU the conversion is zero-copy (``torch.from_numpy`` shares memory with
the sampled numpy arrays, which the buffer never touches again). With a
``device`` the tensors are copied there, from pinned memory and non-blocking
when ``pin_memory=True``.

:class:`ReplayDataset` is an ``IterableDataset`` that samples on a background
thread and yields ``(data, BufferInfo)`` nests of tensors, ready for
``torch.utils.data.DataLoader(dataset, batch_size=None)``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import optree

from recollect.adapters.prefetch import (
    Batches,
    as_source,
    stream_options,
)
from recollect.buffers.sample import BufferInfo, Sample
from recollect.errors import InvalidArgumentError
from recollect.extras import missing_extra

try:
    import torch
except ImportError as err:
    raise missing_extra(err, "recollect.torch") from None

__all__ = ["ReplayDataset", "as_tensors"]


def _to_tensor(x: Any, device: torch.device | None, pin_memory: bool) -> Any:
    if not isinstance(x, np.ndarray | np.generic):
        return x
    x = np.ascontiguousarray(x) if x.dtype != np.bool_ else np.asarray(x)
    if not x.flags.writeable:  # e.g. a uniform sample's shared probabilities: a tensor
        x = x.copy()  # may be written, so it gets its own copy (and torch no warning)
    tensor = torch.from_numpy(x)
    if device is None or device.type == "cpu":
        return tensor
    if pin_memory:
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=pin_memory)


def as_tensors(
    tree: Any, device: str | torch.device | None = None, pin_memory: bool = False
) -> Any:
    """Converts every numpy leaf of ``tree`` into a ``torch.Tensor``.

    Args:
        tree: a nest of numpy arrays (e.g. ``Sample.data``) or a dataclass
            sample (its array fields are converted).
        device: target device (``"cuda"``, ``"cpu"``, ``torch.device``); None keeps CPU.
        pin_memory: copy through pinned memory, non-blocking (only with an accelerator).

    Returns:
        The same structure with tensors; dtypes follow numpy (float32 ->
        ``torch.float32``, bool -> ``torch.bool``, uint8 -> ``torch.uint8``). A
        tensor shares memory with its array, except for read-only arrays, which are
        copied (a tensor may be written).
    """
    dev = torch.device(device) if device is not None else None
    import dataclasses

    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = {f.name: getattr(tree, f.name) for f in dataclasses.fields(tree)}
        return type(tree)(**{k: as_tensors(v, dev, pin_memory) for k, v in fields.items()})
    return optree.tree_map(lambda x: _to_tensor(x, dev, pin_memory), tree, none_is_leaf=False)


class ReplayDataset(torch.utils.data.IterableDataset):
    """An endless stream of sampled batches as tensors, prefetched on a background thread.

    Each item of a :class:`~recollect.ReplayBuffer` is ``(data, BufferInfo(ids,
    probabilities))``; a :class:`~recollect.TransitionBuffer` yields its
    ``TransitionSample`` with tensor fields instead. ``data`` is a nest
    like the spec with tensor leaves ``[batch_size, num_steps, *leaf_shape]``
    (``[batch_size, *leaf_shape]`` for ``num_steps=None``) of the spec's dtypes;
    ``ids`` is int64 ``[batch_size]``, ``probabilities`` float64 ``[batch_size]``.
    On CPU the tensors share memory with freshly gathered numpy arrays (no
    copy); with a ``device`` they are copied there on the prefetch thread
    (through pinned memory, non-blocking, when ``pin_memory=True``).

    Iteration stops cleanly (``StopIteration``) when :meth:`close` is called or
    when the buffer is closed (``buffer.close()``, i.e. ``buffer.closed`` is
    true). Sampling errors (e.g. :class:`~recollect.errors.NotEnoughDataError`
    on an empty buffer) are raised by ``next()``, never replaced by zeros.

    Use ``DataLoader(dataset, batch_size=None)`` (batches are already formed)
    and ``num_workers=0``: the buffer lives in this process; the prefetch
    thread already overlaps sampling with training. In a worker process
    (``num_workers > 0``) iteration raises ``InvalidArgumentError``: each
    worker would sample its own frozen copy of the buffer, yielding the same
    batches as the other workers and never any new data.

    A served table's handle (``client.table(name)`` of a
    :class:`~recollect.service.Client`) works as a buffer: up to
    ``max_in_flight`` sample requests stay outstanding, so the service's round
    trip overlaps training, and the tensors are made on the request threads
    (no prefetch thread over them); iteration ends when the client is closed.

    Args:
        buffer: a :class:`~recollect.buffers.source.SampleSource`: a
            :class:`~recollect.ReplayBuffer`, a
            :class:`~recollect.TransitionBuffer`, a
            :class:`~recollect.service.TableHandle` or a class of your own;
            batches come from its ``stream``.
        batch_size: windows per batch, >= 1.
        num_steps: window length, or None for single steps without a time axis.
        device: where tensors go (``"cpu"``, ``"cuda"``, ``torch.device``); None keeps CPU.
        pin_memory: copy to the device through pinned memory, non-blocking.
        prefetch: batches kept ready, >= 1.
        num_threads: producer threads sampling (and copying to ``device``) concurrently,
            >= 1; batches keep their draw order whatever their number (when they pay:
            :class:`~recollect.adapters.prefetch.Prefetcher`).
        max_in_flight, batches_per_request: a served table's sample requests kept
            outstanding and batches each asks for, >= 1 (what they trade:
            :class:`~recollect.service.SampleStream`); a local buffer ignores them.

    Raises:
        InvalidArgumentError: ``prefetch``, ``num_threads``, ``max_in_flight`` or
            ``batches_per_request`` < 1 (bad ``batch_size``/``num_steps`` are raised by the first
            ``next()``); iterating it in a DataLoader worker process
            (``num_workers > 0``).

    Example:
        >>> loader = DataLoader(ReplayDataset(buf, batch_size=32, num_steps=2), batch_size=None)
        >>> data, info = next(iter(loader))
    """

    def __init__(
        self,
        buffer: Any,
        batch_size: int,
        num_steps: int | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        num_threads: int = 1,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> None:
        super().__init__()
        self.buffer = buffer
        self.batch_size = batch_size
        self.num_steps = num_steps
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self._options = stream_options(prefetch, num_threads, max_in_flight, batches_per_request)
        self._closed = threading.Event()
        self._streams: weakref.WeakSet[Batches] = weakref.WeakSet()

    def _convert(self, s: Any) -> Any:
        """A sample as tensors (on ``device``): ``(data, BufferInfo)``."""
        if not isinstance(s, Sample):  # e.g. a TransitionSample: every array field converted
            return as_tensors(s, self.device, self.pin_memory)
        data = as_tensors(s.data, self.device, self.pin_memory)
        ids, probabilities = torch.from_numpy(s.ids), torch.from_numpy(s.probabilities)
        # BufferInfo's fields are annotated as numpy arrays; here they hold tensors (documented)
        return data, BufferInfo(ids, probabilities)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[tuple[Any, BufferInfo]]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            raise InvalidArgumentError(
                "ReplayDataset cannot be iterated in a DataLoader worker process (got "
                f"num_workers={worker.num_workers}): every worker samples its own copy of the "
                "buffer, so they yield the same batches and never see new data. Use "
                "DataLoader(dataset, batch_size=None, num_workers=0); the dataset already "
                "prefetches on threads (raise num_threads for more)."
            )
        if self._closed.is_set():
            return iter(())
        stream = as_source(self.buffer).stream(
            self.batch_size, self.num_steps, convert=self._convert, **self._options
        )
        self._streams.add(stream)  # weak: an abandoned iterator stops its threads
        if self._closed.is_set():  # closed meanwhile
            stream.close()
        return stream

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stops every iterator of this dataset and its prefetch threads; idempotent."""
        self._closed.set()
        for stream in list(self._streams):
            stream.close()
