"""Bounds how long a writer's queued items wait when the writer goes quiet.

Reverb's C++ writer streams every item to the server as soon as its data is
complete, so the last items of a driver's run reach the table within
milliseconds, with no ``flush`` (TF-Agents' ``ReverbAddTrajectoryObserver``
relies on it). Our writers queue items and send them in batches, which is
what makes them fast; one daemon thread sends a stream's queue once its
oldest item has waited :data:`LINGER_S` seconds, unless the writer sent it
first. A busy writer fills its batch long before that (the thread then finds
a young queue and only waits again), so the batching stays; a quiet one
loses at most :data:`LINGER_S` of latency.
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

    def send_lingering(self) -> float | None:
        """Sends the queue if its oldest item has waited long enough and no other thread
        holds the stream. Returns the seconds until :class:`Linger` should call again
        (a young queue, a busy stream, items the tables refused), or None when nothing
        stays queued."""
        ...


class Linger:
    """A daemon thread that calls ``send_lingering`` on each armed stream when its delay has
    passed, and again after the delay that call returns. Streams are held by weak
    references: a collected writer is forgotten.

    Args:
        delay: seconds between :meth:`arm` and the first call.
    """

    def __init__(self, delay: float = LINGER_S) -> None:
        self.delay = delay
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, weakref.ref[Lingering]]] = {}
        self._pid = -1  # the process the thread runs in (a forked child starts its own)

    def arm(self, stream: Lingering, delay: float | None = None) -> None:
        """Calls ``stream.send_lingering`` ``delay`` (default: the linger delay) seconds from
        now; an armed stream keeps its deadline. Costs a dict insert and a wake-up of the
        thread (once per queue, not per item)."""
        delay = self.delay if delay is None else delay
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread runs here
                self._pid = os.getpid()
                self._due.clear()  # a parent's streams are the parent's to send
                threading.Thread(target=self._run, name="recollect-linger", daemon=True).start()
            armed = self._due.get(id(stream))
            if armed is not None and armed[1]() is stream:
                return
            self._due[id(stream)] = (time.monotonic() + delay, weakref.ref(stream))
            self._cond.notify()  # its deadline may come before the one the thread waits for

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                first = min(due for due, _ in self._due.values())
                if first > now:
                    self._cond.wait(first - now)
                    continue
                ready = [(key, ref) for key, (due, ref) in self._due.items() if due <= now]
                for key, _ in ready:
                    del self._due[key]
            for _, ref in ready:
                stream = ref()
                if stream is not None:
                    again = stream.send_lingering()
                    if again is not None:
                        self.arm(stream, again)
                del stream


LINGER = Linger()
