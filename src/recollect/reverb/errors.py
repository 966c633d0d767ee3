"""Reverb's error classes (``reverb.errors``), also recollect errors.

``ReverbError`` is the base of the errors Reverb's users catch. Ours are also
:class:`recollect.errors.RecollectError` subclasses and the builtin a caller
expects: a call that ran out of time is a ``TimeoutError`` as well.
"""

from __future__ import annotations

from recollect.errors import RecollectError


class ReverbError(RecollectError, RuntimeError):
    """Base class of the errors raised by ``recollect.reverb`` calls (Reverb's name)."""


class DeadlineExceededError(ReverbError, TimeoutError):
    """A call to the server did not complete within its timeout."""


class RateLimiterTimeoutError(DeadlineExceededError):
    """A table's rate limiter kept a sample or an insert blocked past its timeout."""


__all__ = ["DeadlineExceededError", "RateLimiterTimeoutError", "ReverbError"]
