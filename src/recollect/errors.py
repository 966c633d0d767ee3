"""Errors raised by recollect.

Every error is a subclass of :class:`RecollectError` and of the builtin
exception a caller would expect (``ValueError``, ``TypeError`` or
``RuntimeError``; ``AttributeError`` for a method of another class), so
``except ValueError`` keeps working. Messages name the
leaf path, what was expected, what was received and what to do.
"""

from __future__ import annotations


class RecollectError(Exception):
    """Base class of every error raised by recollect."""


class InvalidArgumentError(RecollectError, ValueError):
    """An argument or a combination of arguments is invalid."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type (e.g. a float or a bool where an int is asked for),
    or a keyword or option the callee does not take.

    Also a :class:`InvalidArgumentError` (so ``except ValueError`` keeps catching every
    bad argument) and a ``TypeError`` (as Python raises for a wrong type). A value of the
    right type that is out of range raises a plain :class:`InvalidArgumentError`.
    """


class WrongClassError(RecollectError, AttributeError):
    """A method of another recollect class was called (e.g. ``TransitionBuffer.add_batch``,
    a ``ReplayBuffer`` method); the message names the call to make instead.

    Also an ``AttributeError``, as Python raises for a missing attribute (``hasattr`` stays
    False).
    """


class NoFreeRowsError(InvalidArgumentError):
    """A replay-service shard has fewer free rows than a new writer asked for.

    Raised by ``Client.writer`` when no shard of the table can lease ``num_envs``
    rows; close unused writers, ask for fewer rows or serve more rows.
    """


class SpecError(RecollectError, ValueError):
    """A spec is malformed, or data does not have the spec's structure."""


class ShapeError(RecollectError, ValueError):
    """A leaf's shape (or its leading env/batch dim) does not match the spec."""


class DTypeError(RecollectError, TypeError):
    """A leaf's dtype cannot be cast safely (``same_kind``) to the spec's dtype."""


class CastError(RecollectError, ValueError):
    """A same-kind cast would lose values (overflow, out of range, NaN or inf)."""


class NotEnoughDataError(RecollectError, RuntimeError):
    """The buffer holds no valid window of the requested length yet."""


class CheckpointError(RecollectError, RuntimeError):
    """A checkpoint is missing, damaged, or of an unsupported format version."""


class InsufficientMemoryError(InvalidArgumentError, MemoryError):
    """A RAM buffer would not fit in the available memory (use memmap storage or ``force=True``)."""


class DiskFullError(RecollectError, OSError):
    """The disk has too little free space for a memmap buffer's files (``errno`` ENOSPC)."""


class StateError(RecollectError, RuntimeError):
    """An object was used in the wrong state (a closed manager, no buffer created yet)."""


class RateLimiterTimeout(RecollectError, TimeoutError):
    """A rate limiter kept an insert or a sample blocked past its ``timeout``."""


class ShardUnavailableError(RecollectError, ConnectionError):
    """A replay-service shard is dead or unreachable (the message names table and shard)."""


class ShardNoAnswerError(ShardUnavailableError):
    """A replay-service shard did not answer a call within the caller's timeout; the call
    may still finish (``Endpoint.result`` can be asked again)."""
