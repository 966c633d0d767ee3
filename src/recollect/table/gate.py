"""Gate: blocks a table's inserts and draws while its rate limiter forbids them.

Waiters wait on ``table.cond`` (a condition of the table lock), so every
insert, draw, clear or close that moves the balance wakes them; a wait ends
with the call allowed, a :class:`~recollect.errors.RateLimiterTimeout` after
``timeout`` seconds (at once when no other thread runs that could unblock
it), or a :class:`~recollect.errors.StateError` when the table is closed.
The caller holds the table lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, RateLimiterTimeout, StateError

__all__ = ["Gate"]

_SLICE_S = 0.5  # waits re-check "is any other thread left?" this often


class Gate:
    """The rate-limiter side of one :class:`~recollect.table.Table` (``table.gate``)."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def check_limits(self) -> None:
        """Raises InvalidArgumentError when the rate limiter must deadlock on this table:
        an ``add_batch`` of every row and a sample of one window could block each other,
        or ``min_size_to_sample`` exceeds the windows the table can hold."""
        t = self.table
        limiter = t.rate_limiter
        limiter.check_moves(t.num_envs, 1)
        n = t.sequence_length or 1
        most = t.num_envs * (t.max_length - n + 1)
        if limiter.min_size_to_sample > most:
            raise InvalidArgumentError(
                f"{limiter!r} waits for {limiter.min_size_to_sample} windows but this table holds "
                f"at most {most} windows of {n} step(s) ({t.num_envs} rows of "
                f"{t.max_length} slots): samples would block forever. Lower "
                "min_size_to_sample or raise the capacity."
            )

    def await_insert(self, k: int, timeout: float | None) -> None:
        """Waits until the rate limiter allows an insert of ``k`` steps.

        Args:
            k: steps the insert writes (rows written).
            timeout: seconds to wait at most; None waits forever, 0 never waits.

        Raises:
            RateLimiterTimeout: still forbidden after ``timeout`` (or no other thread
                runs that could ever allow it).
            StateError: the table was closed while (or before) waiting.
            InvalidArgumentError: inserts of ``k`` can never be allowed by this limiter.
        """
        t = self.table
        limiter = t.rate_limiter

        def allowed() -> bool:
            return limiter.insert_allowed(t.inserts, t.samples, k, t.size())

        if allowed():
            return
        limiter.check_moves(k, 1)
        self._wait(allowed, timeout, "insert", k, None)

    def await_sample(self, b: int, n: int, within: bool, timeout: float | None) -> None:
        """Waits until the rate limiter allows a draw of ``b`` windows of ``n`` steps (and,
        with ``max_times_sampled``, ``b`` sampleable windows exist); raises as
        :meth:`await_insert`."""
        if self.sample_allowed(b, n, within):
            return
        self.table.rate_limiter.check_moves(1, b)
        self._wait(lambda: self.sample_allowed(b, n, within), timeout, "sample", b, n)

    def sample_allowed(self, b: int, n: int, within: bool) -> bool:
        """Whether a draw of ``b`` windows of ``n`` steps may go ahead now."""
        t = self.table
        limiter = t.rate_limiter
        if not limiter.sample_allowed(t.inserts, t.samples, b, 0x7FFFFFFFFFFFFFFF):
            return False
        return t.index.count(n, within) >= self._needed(b)

    def _needed(self, b: int) -> int:
        """Sampleable windows a draw of ``b`` needs."""
        t = self.table
        return max(t.rate_limiter.min_size_to_sample, b if t.max_times_sampled else 1)

    def _wait(
        self, allowed: Callable[[], bool], timeout: float | None, side: str, amount: int, n: Any
    ) -> None:
        if timeout is not None and (not np.isfinite(timeout) or timeout < 0):
            raise InvalidArgumentError(
                f"`timeout` must be None or seconds >= 0; got timeout={timeout!r}."
            )
        t = self.table
        limiter = t.rate_limiter
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        t.waiters += 1
        try:
            while not allowed():
                if t.closed:
                    raise StateError(
                        f"the buffer was closed while a{'n' if side == 'insert' else ''} {side} "
                        f"of {amount} waited on {limiter!r}; nothing was "
                        f"{'written' if side == 'insert' else 'drawn'}."
                    )
                left = None if deadline is None else deadline - time.monotonic()
                alone = threading.active_count() == 1
                if alone or (left is not None and left <= 0):
                    raise RateLimiterTimeout(self._message(side, amount, n, timeout, alone))
                t.cond.wait(_SLICE_S if left is None else min(left, _SLICE_S))
        finally:
            t.waiters -= 1
            waited = time.monotonic() - start
            if side == "insert":
                limiter.insert_blocked_s += waited
            else:
                limiter.sample_blocked_s += waited

    def _message(self, side: str, amount: int, n: Any, timeout: float | None, alone: bool) -> str:
        t = self.table
        limiter = t.rate_limiter
        spi = limiter.samples_per_insert
        diff = limiter.diff(t.inserts, t.samples)
        if side == "insert":
            unblock = (
                f"an insert of {amount} needs diff + {amount * spi:g} <= max_diff="
                f"{limiter.max_diff:g}: sample at least "
                f"{int(np.ceil(diff + amount * spi - limiter.max_diff))} more window(s) from "
                "another thread"
            )
        else:
            short = int(np.ceil(limiter.min_diff + amount - diff))
            for_ratio = int(np.ceil(short / spi)) if short > 0 else 0
            # each inserted step adds about one window: count the windows still missing too
            for_size = max(0, self._needed(amount) - t.size(n))
            steps = max(for_ratio, for_size)
            more = f"about {steps} more step(s)" if steps > 0 else "more steps"
            unblock = (
                f"a sample of {amount} needs diff - {amount} >= min_diff={limiter.min_diff:g} and "
                f"at least {self._needed(amount)} sampleable windows: insert {more} from another "
                "thread"
            )
        why = (
            "no other thread is running that could unblock it"
            if alone
            else f"still blocked after timeout={timeout}s"
        )
        return (
            f"{side} blocked by {limiter!r}: {why}. inserts={t.inserts}, samples={t.samples}, "
            f"diff = inserts * samples_per_insert - samples = {diff:g}, sampleable windows="
            f"{t.size(n)}; {unblock}."
        )
