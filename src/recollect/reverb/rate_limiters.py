"""Rate limiters (``reverb.rate_limiters``): keep samples per insert within bounds.

A limiter counts inserts and samples of its table and allows an operation only
while ``error = inserts * samples_per_insert - samples`` stays in
``[min_diff, max_diff]``: an insert is allowed when the table holds fewer than
``min_size_to_sample`` items after it, or when ``(inserts + n) * spi - samples
<= max_diff``; a sample of ``n`` when the table holds ``>= min_size_to_sample``
items and ``inserts * spi - (samples + n) >= min_diff``. The blocked side waits
(with a timeout where the caller gives one).
"""

from __future__ import annotations

import logging
import sys

from recollect.arguments import reverb_positive_int
from recollect.errors import InvalidArgumentError

_log = logging.getLogger(__name__)


class RateLimiter:
    """The general limiter: every other one is this with chosen numbers.

    Args:
        samples_per_insert: target samples per insert (> 0).
        min_size_to_sample: items needed before any sample (>= 1).
        min_diff, max_diff: the allowed range of the error (``min_diff <= max_diff``).
    """

    def __init__(
        self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float
    ) -> None:
        reverb_positive_int("min_size_to_sample", min_size_to_sample)
        if not samples_per_insert > 0:
            raise InvalidArgumentError(f"samples_per_insert ({samples_per_insert}) must be > 0.")
        if min_diff > max_diff:
            raise InvalidArgumentError(
                f"min_diff ({min_diff}) must be <= max_diff ({max_diff}); swap them."
            )
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.min_diff = float(min_diff)
        self.max_diff = float(max_diff)

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert}, "
            f"min_size_to_sample={self.min_size_to_sample}, min_diff={self.min_diff}, "
            f"max_diff={self.max_diff})"
        )


class MinSize(RateLimiter):
    """Blocks samples while the table holds fewer than ``min_size_to_sample`` items."""

    def __init__(self, min_size_to_sample: int) -> None:
        reverb_positive_int("min_size_to_sample", min_size_to_sample)
        super().__init__(1.0, min_size_to_sample, -sys.float_info.max, sys.float_info.max)


class SampleToInsertRatio(RateLimiter):
    """Keeps ``samples_per_insert`` within ``error_buffer`` once ``min_size_to_sample`` is reached.

    Args:
        samples_per_insert: the target ratio (> 0).
        min_size_to_sample: items before sampling may start (>= 1).
        error_buffer: a number ``b`` (range ``min_size * spi -+ b``) or a ``(min, max)`` range.

    Raises:
        InvalidArgumentError (a ValueError): a range narrower than ``2 * max(1, spi)`` or above
            ``spi * min_size_to_sample`` (either would deadlock), or a bad argument.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ) -> None:
        if isinstance(error_buffer, tuple | list):
            min_diff, max_diff = error_buffer
        else:
            offset = samples_per_insert * min_size_to_sample
            min_diff, max_diff = offset - error_buffer, offset + error_buffer
        if samples_per_insert <= 0:
            raise InvalidArgumentError(f"samples_per_insert ({samples_per_insert}) must be > 0")
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise InvalidArgumentError(
                "The size of error_buffer must be >= max(1.0, samples_per_insert) as smaller "
                f"values could completely block samples and/or insert calls; got range "
                f"({min_diff}, {max_diff}) for samples_per_insert={samples_per_insert}."
            )
        if max_diff < samples_per_insert * min_size_to_sample:
            _log.warning(
                "The range covered by error_buffer is below samples_per_insert * "
                "min_size_to_sample. If the sampler cannot sample concurrently, this will "
                "result in a deadlock as soon as min_size_to_sample items have been inserted."
            )
        if min_diff > samples_per_insert * min_size_to_sample:
            raise InvalidArgumentError(
                "The range covered by error_buffer is above samples_per_insert * "
                "min_size_to_sample. This will result in a deadlock as soon as "
                f"min_size_to_sample items have been inserted; got min_diff={min_diff} > "
                f"{samples_per_insert * min_size_to_sample}."
            )
        super().__init__(samples_per_insert, min_size_to_sample, min_diff, max_diff)


class Queue(RateLimiter):
    """A queue of ``size`` items: inserts block when full, samples when empty.

    Use ``Table.queue``, which pairs it with Fifo selectors and ``max_times_sampled=1``.
    """

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))


class Stack(RateLimiter):
    """As :class:`Queue`, for ``Table.stack`` (Lifo selectors)."""

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))


__all__ = ["MinSize", "Queue", "RateLimiter", "SampleToInsertRatio", "Stack"]
