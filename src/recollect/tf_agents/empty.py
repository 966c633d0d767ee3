"""The empty-buffer error of ``TFUniformReplayBuffer``, also a tf.errors.InvalidArgumentError."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from recollect.errors import NotEnoughDataError

__all__ = ["EMPTY_MESSAGE", "EmptyBufferError", "empty_error"]

#: TF-Agents' own text for sampling an empty buffer (its tests match it); ours follows
EMPTY_MESSAGE = "TFUniformReplayBuffer is empty. Make sure to add items before sampling the buffer."


class EmptyBufferError(NotEnoughDataError, ValueError, tf.errors.InvalidArgumentError):
    """No valid window is stored: :class:`~recollect.errors.NotEnoughDataError` that
    ``except tf.errors.InvalidArgumentError`` also catches, as TF-Agents' empty-buffer assert.

    Raised by :class:`TFUniformReplayBuffer` (eagerly as this class; inside a
    ``tf.function`` or a dataset TensorFlow reports it as
    ``tf.errors.InvalidArgumentError`` with this message).
    """

    def __init__(self, message: str) -> None:
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)

    def __reduce__(self) -> Any:
        return type(self), (self.message,)


def empty_error(err: Exception) -> Exception:
    """A NotEnoughDataError as :class:`EmptyBufferError` whose message starts with
    TF-Agents' text (:data:`EMPTY_MESSAGE`), then says what recollect found;
    other errors unchanged."""
    if isinstance(err, NotEnoughDataError) and not isinstance(err, EmptyBufferError):
        return EmptyBufferError(f"{EMPTY_MESSAGE} ({err})")
    return err
