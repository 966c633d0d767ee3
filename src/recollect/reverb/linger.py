"""Bounds how long a writer's queued items wait when the writer goes quiet.

Reverb's C++ writer streams every item to the server as soon as its data is
complete, so the last items of a driver's run reach the table within
milliseconds, with no ``flush`` (TF-Agents' ``ReverbAddTrajectoryObserver``
relies on it). Our writers queue items and send them in batches, which is
what makes them fast; one daemon thread sends a stream's queue
:data:`LINGER_S` seconds after the queue stopped being empty, unless the
writer sent it first. A busy writer fills its batch long before that, so the
batching stays; a quiet one loses at most :data:`LINGER_S` of latency.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Protocol

LINGER_S = 0.02  # seconds a queued item waits for more before it is sent on its own
RETRY_MAX_S = 0.1  # the longest wait between tries at items the tables refused (doubling)


class Lingering(Protocol):
    """What :class:`Linger` needs of a writer's stream."""

    def send_lingering(self) -> bool:
        """Sends what the tables take now, unless another thread holds the stream; True when
        items stay queued (then :class:`Linger` tries again later)."""
        ...


class Linger:
    """A daemon thread that calls ``send_lingering`` on each armed stream when its delay has
    passed. Streams are held by weak references: a collected writer is forgotten.

    Args:
        delay: seconds between :meth:`arm` and the send.
    """

    def __init__(self, delay: float = LINGER_S) -> None:
        self.delay = delay
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, weakref.ref[Lingering], float]] = {}
        self._pid = -1  # the process the thread runs in (a forked child starts its own)

    def arm(self, stream: Lingering, delay: float | None = None) -> None:
        """Sends ``stream``'s queue ``delay`` (default: the linger delay) seconds from now; an
        armed stream keeps its earlier deadline. Costs a dict insert and a wake-up of the
        thread (once per queue, not per item). Items the tables refused (rate limiters) are
        tried again after twice the last delay, at most :data:`RETRY_MAX_S`."""
        delay = self.delay if delay is None else delay
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread runs here
                self._pid = os.getpid()
                self._due.clear()  # a parent's streams are the parent's to send
                threading.Thread(target=self._run, name="recollect-linger", daemon=True).start()
            armed = self._due.get(id(stream))
            if armed is not None and armed[1]() is stream:
                return
            self._due[id(stream)] = (time.monotonic() + delay, weakref.ref(stream), delay)
            self._cond.notify()  # its deadline may come before the one the thread waits for

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                first = min(entry[0] for entry in self._due.values())
                if first > now:
                    self._cond.wait(first - now)
                    continue
                ready = [(key, entry) for key, entry in self._due.items() if entry[0] <= now]
                for key, _ in ready:
                    del self._due[key]
            for _, (_, ref, delay) in ready:
                stream = ref()
                if stream is not None and stream.send_lingering():
                    self.arm(stream, min(2 * delay, max(RETRY_MAX_S, self.delay)))
                del stream


LINGER = Linger()
