"""A table's lock in a forked child: free again, whatever the parent's threads held.

``os.fork()`` copies a lock in the state it had at that instant. When a
read-ahead or prefetch thread of the parent held a table's lock (it draws
under it), the child's copy stays held by a thread that does not exist in the
child, and the child's first ``sample()`` waits forever. The same holds for
the lock of the table's random generator (numpy's ``BitGenerator.lock``,
taken by every draw). Every live :class:`~recollect.table.Table` is therefore
registered here, and a child re-initialises both locks in place
(``_at_fork_reinit``, what :mod:`threading` does for its own locks), so every
holder of a reference to ``table.lock``, ``table.cond`` or the generator sees
the freed lock. A lock the forking thread itself holds is left as it is: that
thread goes on in the child and releases it. Waiters counted in the parent do
not exist in the child either, so ``table.waiters`` starts again at 0.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

__all__ = ["register", "reset_in_child"]

#: every live table
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def register(table: Any) -> None:
    """Frees ``table.lock`` (and ``table.cond``) in every child forked from now on."""
    _LIVE.add(table)


def reset_in_child(table: Any) -> None:
    """Frees ``table``'s lock, its condition and its generator's lock, unless this
    thread holds them.

    Called in a forked child; only the forking thread exists there.
    """
    table.waiters = 0
    _reinit(getattr(getattr(table.rng, "bit_generator", None), "lock", None))
    lock, cond = table.lock, table.cond
    if lock._is_owned():  # the forking thread holds it and will release it
        return
    reinit = getattr(cond, "_at_fork_reinit", None)
    if reinit is not None and getattr(cond, "_lock", None) is lock:
        reinit()  # frees the lock in place and forgets the parent's waiters
    else:  # an interpreter without it: new objects, looked up as attributes by every user
        table.lock = threading.RLock()
        table.cond = threading.Condition(table.lock)


def _reinit(lock: Any) -> None:
    """Frees ``lock`` in place unless this thread holds it (or it cannot say)."""
    owned = getattr(lock, "_is_owned", None)
    reinit = getattr(lock, "_at_fork_reinit", None)
    if reinit is not None and owned is not None and not owned():
        reinit()


def _after_fork_in_child() -> None:
    for table in list(_LIVE):
        reset_in_child(table)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
