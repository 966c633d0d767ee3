"""The chunked sampler of :func:`recollect.tf_data.as_dataset` and its process-exit guard.

:func:`chunked_sample_fn` is the ``tf.numpy_function`` that draws a chunk of
elements per call (one when the buffer was written since the previous call,
doubling up to a cap while it is not); :func:`splitter` splits a chunk into
its elements and, given the writer's generation variable, drops what was
drawn before a write. While the buffer is only read, :func:`chunked_sample_fn`
draws the next chunk on a background thread (the gather releases the GIL
while TensorFlow consumes the current chunk) and uses it only if what the
table may return did not change since that draw began (``table.version``:
writes, clears, loads, deletes and priority updates all move it); it never
draws ahead on a table whose draws change it (``table.read_only_draws``). :data:`in_flight`
counts the sampling calls running inside TensorFlow and those background
draws and, at ``atexit``, stops and drains them so that a process whose
parallel ``map`` iterator is destroyed at shutdown exits (a background draw
waiting on a ``MinSize`` limiter ends then too).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from recollect.adapters.prefetch import buffer_closed, flat_spec_of, outer_shape, sample_concurrent
from recollect.buffers.prefetcher import draw_stopped_by
from recollect.buffers.sample import BufferInfo
from recollect.errors import StateError
from recollect.extras import missing_extra

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_data") from None

__all__ = ["InFlight", "chunk_ok", "chunked_sample_fn", "in_flight", "no_read_ahead", "splitter"]


class InFlight:
    """Counts the sampling calls running inside TensorFlow; stops new ones once the process exits.

    At interpreter shutdown TensorFlow's parallel ``map`` iterators are
    destroyed while their runner threads may still be inside a
    ``tf.numpy_function`` call; such a thread cannot take the GIL back once
    finalization began (Python ends it) and the destructor waits for it
    forever. :meth:`quiesce` runs at ``atexit`` (before finalization): it makes
    every later call return at once as "closed" (the dataset ends), and waits
    until the running calls have returned, so none is left to hang on.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.exiting = False

    def __enter__(self) -> None:
        with self.lock:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.count -= 1

    def quiesce(self, timeout_s: float = 5.0, settle_s: float = 0.25) -> None:
        """Stops new sampling; waits until no call ran for ``settle_s`` (at most ``timeout_s``)."""
        self.exiting = True
        deadline = time.monotonic() + timeout_s
        idle_since = None
        while time.monotonic() < deadline:
            now = time.monotonic()
            if self.count:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= settle_s:
                return
            time.sleep(0.005)


#: The sampling calls of this process (see :class:`InFlight`).
in_flight = InFlight()
atexit.register(in_flight.quiesce)


class _Predraw:
    """A chunk drawn on a background thread: ``tag`` is the table's version read before
    the draw, ``k`` its elements; ``out`` or ``error`` once ``done`` is set."""

    def __init__(self, tag: Any, k: int) -> None:
        self.tag, self.k, self.pid = tag, k, os.getpid()
        self.done = threading.Event()
        self.cancelled = False
        self.out: list[np.ndarray] | None = None
        self.error: BaseException | None = None

    def is_set(self) -> bool:
        """The ``stop`` of a rate-limited draw: dropped unused, or the process exits."""
        return self.cancelled or in_flight.exiting


#: Seconds between checks of the buffer's close and the process's exit while a call waits.
_WAIT_SLICE_S = 0.05
#: Seconds a read-ahead thread waits for its next chunk before it ends (the next one restarts it).
_IDLE_S = 1.0


class _Worker:
    """One daemon thread running the jobs handed to it in turn; it ends after ``_IDLE_S``
    without one and holds no job (nor what the job references) meanwhile.

    A thread kept and woken, not one started per chunk: ``Thread.start`` waits
    until the new thread runs, and that thread then holds the GIL the caller
    needs to return its chunk to TensorFlow (up to the 5 ms switch interval).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No thread, no job (also in a forked child: the thread stayed in the parent)."""
        self.cond = threading.Condition()
        self.jobs: list[Callable[[], None]] = []
        self.alive = False
        self.pid = os.getpid()

    def submit(self, job: Callable[[], None]) -> None:
        if self.pid != os.getpid():
            self.reset()
        with self.cond:
            self.jobs.append(job)
            if self.alive:
                self.cond.notify()
                return
            self.alive = True
        try:
            threading.Thread(target=self.run, name="recollect-read-ahead", daemon=True).start()
        except BaseException:
            with self.cond:
                self.alive = False
                self.jobs.remove(job)
            raise

    def run(self) -> None:
        while True:
            with self.cond:
                if not self.jobs:
                    self.cond.wait(_IDLE_S)
                if not self.jobs:
                    self.alive = False
                    return
                job = self.jobs.pop(0)
            job()
            del job


def chunked_sample_fn(
    buffer: Any,
    sample_batch_size: int | None,
    num_steps: int | None,
    most: int,
    wrap_error: Callable[[Exception], Exception] | None,
) -> Callable[[Any], tuple[Any, BufferInfo, Any, Any]]:
    """``fn(generation) -> (items [k, ...], BufferInfo [k, ...], generation, ok)``, k <= ``most``.

    A call draws one element when what the buffer may return changed since
    the previous call (a write, clear, load, delete or priority update:
    ``table.version`` moved), and twice the previous call's count (up to
    ``most``) when it did not: a training loop that adds, deletes or updates
    priorities between its reads never gets elements drawn ahead of those
    changes, and one that only reads amortises the
    ``tf.numpy_function`` call over up to ``most`` elements. ``ok`` is False
    (and k = 0) once the buffer is closed or the process exits.

    Read-ahead that cannot go stale: a call that found no change since the
    previous one starts drawing the next chunk on a background thread (the
    gather releases the GIL while TensorFlow consumes this chunk), tagged with
    the table's version read before that draw. The next call takes it only
    when the table's version still equals the tag, so it was drawn from what
    the table held when the call came (steps, deletions, priorities);
    otherwise it drops it and draws anew. It
    does so only where a draw leaves the table as it was
    (``table.read_only_draws``: no rate limiter that counts samples, no
    ``max_times_sampled``), and an error of the background draw is raised by
    the next call.
    """
    flat = flat_spec_of(buffer)
    outer = outer_shape(sample_batch_size, num_steps)
    batch = 1 if sample_batch_size is None else int(sample_batch_size)
    info_tail = [] if sample_batch_size is None else [batch]
    shapes: list[list[Any]] = [[None, *outer, *s] for s in flat.shapes] + [[None, *info_tail]] * 2
    dtypes = [tf.as_dtype(d) for d in flat.dtypes] + [tf.int64, tf.float64]
    table: Any = getattr(buffer, "table", None)
    index = getattr(table, "index", None)
    read_ahead = index is not None and bool(getattr(table, "read_only_draws", False))
    state: dict[str, Any] = {"version": None, "size": 0, "predraw": None}
    lock = threading.Lock()
    worker = _Worker()

    def written() -> Any:  # moves with every change of what a draw may return
        return None if index is None else table.version

    def stopped() -> bool:
        return buffer_closed(buffer) or in_flight.exiting

    def closed(gen: Any) -> list[Any]:
        empty = [
            np.zeros([0, *s[1:]], d.as_numpy_dtype) for s, d in zip(shapes, dtypes, strict=True)
        ]
        return [*empty, gen, np.bool_(False)]

    def draw(k: int) -> list[np.ndarray]:
        s = sample_concurrent(buffer, batch * k, num_steps)
        leaves = [*flat.treedef.flatten_up_to(s.data), s.ids, s.probabilities]
        return [x.reshape([k, *shape[1:]]) for x, shape in zip(leaves, shapes, strict=True)]

    def predraw(pending: _Predraw) -> None:  # on its thread; counted in ``in_flight``
        try:
            if not pending.is_set():
                pending.out = draw_stopped_by(pending, lambda: draw(pending.k))
        except BaseException as err:  # raised by the call that takes it
            pending.error = err
        finally:
            pending.done.set()
            in_flight.__exit__()

    def start_predraw(k: int) -> None:
        pending = _Predraw(written(), k)  # the tag is read before the draw
        with lock:
            if state["predraw"] is not None or in_flight.exiting:
                return
            state["predraw"] = pending
        in_flight.__enter__()
        try:
            worker.submit(lambda: predraw(pending))
        except BaseException as err:  # no thread: the next call raises it
            pending.error = err
            pending.done.set()
            in_flight.__exit__()

    def take(pending: _Predraw, now: Any) -> list[np.ndarray] | None:
        """The pre-drawn chunk when the table did not change since its tag, else None."""
        if pending.tag != now or pending.pid != os.getpid():  # changed, or drawn in the parent
            pending.cancelled = True  # ends a draw waiting on a MinSize limiter
            return None
        while not pending.done.wait(_WAIT_SLICE_S):
            if stopped():
                raise StateError("the buffer was closed or the process exits.")
        if written() != pending.tag:  # a change while it was drawn
            return None
        if pending.error is not None:
            raise pending.error
        return pending.out

    def sample_numpy(gen: Any) -> list[Any]:
        with in_flight:
            if stopped():
                return closed(gen)
            now = written()
            same = now is not None and now == state["version"]
            k = min(most, 2 * state["size"]) if same else 1
            with lock:
                pending, state["predraw"] = state["predraw"], None
            try:  # a rate limiter may block the draw; closing the buffer wakes it
                out = None if pending is None else take(pending, now)
                if out is None:
                    out = draw(k)
                else:
                    k = pending.k
            except StateError:
                if stopped():
                    return closed(gen)
                raise
            except Exception as err:
                if wrap_error is None:
                    raise
                raise wrap_error(err) from err
            state["version"], state["size"] = now, k
            if same and read_ahead and not stopped():
                start_predraw(min(most, 2 * k))
            return [*out, gen, np.bool_(True)]

    def fn(gen: Any) -> tuple[Any, BufferInfo, Any, Any]:
        gen = tf.cast(gen, tf.int64)
        out = tf.numpy_function(
            sample_numpy, [gen], [*dtypes, tf.int64, tf.bool], stateful=True, name="sample"
        )
        for tensor, shape in zip(out, [*shapes, [], []], strict=True):
            tensor.set_shape(shape)
        return flat.unflatten(out[:-4]), BufferInfo(out[-4], out[-3]), out[-2], out[-1]

    return fn


def splitter(generation: Any) -> Callable[..., tf.data.Dataset]:
    """``flat_map`` function splitting a chunk into its elements (slices sharing its memory).

    With a ``generation`` variable, every element but the first is dropped
    once the variable differs from the chunk's (the buffer was written after
    the chunk was drawn); the first element is the one the pipeline's
    ``map``/``prefetch`` holds (drawn when it was asked for, or ahead as the
    user requested).
    """

    def split(items: Any, info: BufferInfo, gen: Any, ok: Any) -> tf.data.Dataset:
        elements = tf.data.Dataset.from_tensor_slices((items, info))
        if generation is None:
            return elements

        def fresh(position: Any, element: Any) -> Any:
            return tf.logical_or(position == 0, tf.equal(generation.read_value(), gen))

        return elements.enumerate().take_while(fresh).map(lambda position, element: element)

    return split


def no_read_ahead() -> tf.data.Options:
    """Options without tf.data's own read-ahead: ``inject_prefetch`` (a ``prefetch`` after
    a user's ``map``) and ``map_parallelization`` (a user's stateless ``map`` run in parallel).

    Both would draw elements ahead that nobody asked for; the options reach
    every dataset chained after this one. A user's own ``prefetch`` and
    ``num_parallel_calls`` still apply.
    """
    options = tf.data.Options()
    optimization = options.experimental_optimization
    for name in ("inject_prefetch", "map_parallelization"):
        if hasattr(optimization, name):
            setattr(optimization, name, False)
    return options


def chunk_ok(items: Any, info: BufferInfo, gen: Any, ok: Any) -> Any:
    """Whether a chunk was sampled (False once the buffer is closed or the process exits)."""
    return ok
