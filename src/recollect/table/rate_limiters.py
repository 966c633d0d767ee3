"""Rate limiters (Reverb's ``rate_limiters.py``): keep samples per insert within bounds.

A table counts ``inserts`` (steps written: one per row per ``add_batch``) and
``samples`` (windows drawn). Its rate limiter looks at their balance::

    diff = inserts * samples_per_insert - samples

* an insert of ``k`` steps may go ahead when the table holds
  ``size + k <= min_size_to_sample`` windows (filling up is free), or when
  ``diff + k * samples_per_insert <= max_diff``;
* a sample of ``b`` windows may go ahead when ``size >= min_size_to_sample``
  and ``diff - b >= min_diff``.

``size`` is the number of sampleable windows (of the requested length when
sampling; of ``sequence_length`` or 1 when inserting). A forbidden call waits
(see ``ReplayBuffer.add_batch`` and ``sample``, argument ``timeout``) until
the other side moved the balance back.

Named set-ups: :class:`MinSize` (only a minimum size), :class:`SampleToInsertRatio`
(a target ratio with an error buffer), :class:`Queue` and :class:`Stack` (at
most ``size`` items inserted but not yet sampled).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError

__all__ = [
    "MinSize",
    "Queue",
    "RateLimiter",
    "SampleToInsertRatio",
    "Stack",
    "rate_limiter_from_config",
]

_REGISTRY: dict[str, type[RateLimiter]] = {}
_BIG = float(2**62)  # "unbounded" diff bounds (Reverb: the largest float)


def _min_size(value: Any) -> int:
    return positive_int("min_size_to_sample", value)


def _number(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or math.isnan(number):
        raise InvalidArgumentError(f"`{name}` must be a number; got {name}={value!r}.")
    return number


class RateLimiter:
    """The general rate limiter; see the module doc for the rules.

    Args:
        samples_per_insert: samples each insert pays for (> 0, finite).
        min_size_to_sample: windows the table must hold before any sample (>= 1).
        min_diff: lowest allowed ``diff`` after a sample.
        max_diff: highest allowed ``diff`` after an insert (>= ``min_diff``).

    Raises:
        InvalidArgumentError: an argument out of range.

    Example:
        >>> limiter = RateLimiter(samples_per_insert=4.0, min_size_to_sample=100,
        ...                       min_diff=300.0, max_diff=500.0)
    """

    name: ClassVar[str] = "RateLimiter"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = cls.__name__
        _REGISTRY[cls.name] = cls

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
    ) -> None:
        spi = _number("samples_per_insert", samples_per_insert)
        if not math.isfinite(spi) or spi <= 0:
            raise InvalidArgumentError(
                f"`samples_per_insert` must be a finite number > 0; got samples_per_insert="
                f"{samples_per_insert!r}."
            )
        self.samples_per_insert = spi
        self.min_size_to_sample = _min_size(min_size_to_sample)
        self.min_diff = max(-_BIG, _number("min_diff", min_diff))
        self.max_diff = min(_BIG, _number("max_diff", max_diff))
        if self.min_diff > self.max_diff:
            raise InvalidArgumentError(
                f"`min_diff` must be <= `max_diff`; got min_diff={min_diff}, max_diff="
                f"{max_diff}. Inserts and samples would both block forever."
            )
        #: seconds inserts and samples spent blocked by this limiter
        self.insert_blocked_s = 0.0
        self.sample_blocked_s = 0.0

    # -- the rules (pure arithmetic; the table passes its counters) --------------
    def diff(self, inserts: int, samples: int) -> float:
        """``inserts * samples_per_insert - samples``."""
        return inserts * self.samples_per_insert - samples

    @property
    def counts_samples(self) -> bool:
        """Whether a sample moves a bound the limiter checks (False for :class:`MinSize`, whose
        ``diff`` bounds are unbounded: only the table's size gates a sample, nothing an insert)."""
        return self.min_diff > -_BIG or self.max_diff < _BIG

    def insert_allowed(self, inserts: int, samples: int, k: int, size: int) -> bool:
        """Whether an insert of ``k`` steps may go ahead now (``size`` sampleable windows)."""
        free = size + k <= self.min_size_to_sample  # filling up is free
        return free or self.balance_allows_insert(inserts, samples, k)

    def balance_allows_insert(self, inserts: int, samples: int, k: int) -> bool:
        """The cheap half of :meth:`insert_allowed`: ``diff + k * spi <= max_diff``."""
        return (inserts + k) * self.samples_per_insert - samples <= self.max_diff

    def sample_allowed(self, inserts: int, samples: int, b: int, size: int) -> bool:
        """Whether a sample of ``b`` windows may go ahead now (``size`` sampleable windows)."""
        return (
            inserts * self.samples_per_insert - samples - b >= self.min_diff
            and size >= self.min_size_to_sample
        )

    def check_moves(self, inserts: int, samples: int) -> None:
        """Raises when inserts of ``inserts`` steps and samples of ``samples`` windows can
        deadlock: the ``[min_diff, max_diff]`` window is narrower than what one of each moves.

        Raises:
            InvalidArgumentError: naming the numbers and what to change.
        """
        width = self.max_diff - self.min_diff
        spi = self.samples_per_insert
        need = inserts * spi + samples
        if spi.is_integer() and self.min_diff.is_integer() and self.max_diff.is_integer():
            need -= 1  # integer balances: the bounds themselves are reachable
        if width < need:
            raise InvalidArgumentError(
                f"{self!r} cannot serve inserts of {inserts} step(s) and samples of {samples} "
                f"window(s): max_diff - min_diff = {width:g} is less than {need:g} (= inserts * "
                f"samples_per_insert + samples{' - 1' if need != inserts * spi + samples else ''}"
                "), so both sides could block forever. Widen the error buffer (max_diff - "
                "min_diff), or insert fewer rows or sample smaller batches per call."
            )

    # -- config and state ---------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """JSON-able constructor arguments."""
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "min_diff": self.min_diff,
            "max_diff": self.max_diff,
        }

    def describe(self) -> dict[str, Any]:
        """``{"type", "config", "samples_per_insert", "min_size_to_sample", "min_diff",
        "max_diff"}``: the name, the arguments and the resolved bounds."""
        return {
            "type": self.name,
            "config": self.get_config(),
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "min_diff": self.min_diff,
            "max_diff": self.max_diff,
        }

    def copy(self) -> RateLimiter:
        """A new limiter with the same configuration (and no blocked time)."""
        return type(self)(**self.get_config())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{self.name}({args})"


_REGISTRY["RateLimiter"] = RateLimiter


class MinSize(RateLimiter):
    """Blocks samples until the table holds ``min_size_to_sample`` windows; never blocks inserts."""

    def __init__(self, min_size_to_sample: int) -> None:
        super().__init__(1.0, min_size_to_sample, -_BIG, _BIG)

    def get_config(self) -> dict[str, Any]:
        return {"min_size_to_sample": self.min_size_to_sample}


class SampleToInsertRatio(RateLimiter):
    """Keeps ``samples / inserts`` near ``samples_per_insert`` once ``min_size_to_sample`` is held.

    Args:
        samples_per_insert: the target ratio (> 0).
        min_size_to_sample: windows held before sampling starts (>= 1).
        error_buffer: how far the balance may stray: a number ``e`` gives
            ``[offset - e, offset + e]`` around ``offset = samples_per_insert *
            min_size_to_sample`` (the balance when sampling starts), a pair
            ``(min_diff, max_diff)`` gives the bounds directly.

    Raises:
        InvalidArgumentError: as Reverb's ``SampleToInsertRatio``: the bounds are
            narrower than ``2 * max(1, samples_per_insert)`` (one insert and one sample
            could then block each other forever), the lower bound exceeds
            ``samples_per_insert * min_size_to_sample`` (samples would block forever),
            or an argument out of range.

    Warns:
        RuntimeWarning: the upper bound is below ``samples_per_insert *
            min_size_to_sample`` (Reverb logs the same warning).
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float] | list[float],
    ) -> None:
        spi = _number("samples_per_insert", samples_per_insert)
        size = _min_size(min_size_to_sample)
        if isinstance(error_buffer, tuple | list):
            if len(error_buffer) != 2:
                raise InvalidArgumentError(
                    f"`error_buffer` must be a number or a (min_diff, max_diff) pair; got "
                    f"{error_buffer!r}."
                )
            lo, hi = (_number("error_buffer", v) for v in error_buffer)
        else:
            e = _number("error_buffer", error_buffer)
            if e < 0:
                raise InvalidArgumentError(f"`error_buffer` must be >= 0; got {error_buffer!r}.")
            lo, hi = spi * size - e, spi * size + e
        need = 2 * max(1.0, spi)
        if hi - lo < need:
            raise InvalidArgumentError(
                f"the error buffer [{lo:g}, {hi:g}] of SampleToInsertRatio(samples_per_insert="
                f"{spi:g}, ...) spans {hi - lo:g}, less than 2 * max(1, samples_per_insert) = "
                f"{need:g}: inserts and samples could block each other forever. Use an "
                f"error_buffer of at least {need / 2:g} (or a pair at least {need:g} apart)."
            )
        offset = spi * size  # the balance when sampling starts
        if lo > offset:
            raise InvalidArgumentError(
                f"the error buffer [{lo:g}, {hi:g}] of SampleToInsertRatio lies above "
                f"samples_per_insert * min_size_to_sample = {offset:g}: samples would block "
                f"forever once {size} windows are held. Use a lower bound <= {offset:g} (as "
                "Reverb requires)."
            )
        if hi < offset:  # Reverb logs this one and goes on
            warnings.warn(
                f"the error buffer [{lo:g}, {hi:g}] of SampleToInsertRatio lies below "
                f"samples_per_insert * min_size_to_sample = {offset:g}: unless samples run "
                f"concurrently with inserts, inserts block once {size} windows are held.",
                RuntimeWarning,
                stacklevel=2,
            )
        self.error_buffer = list(error_buffer) if isinstance(error_buffer, tuple) else error_buffer
        super().__init__(spi, size, lo, hi)

    def get_config(self) -> dict[str, Any]:
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "error_buffer": self.error_buffer,
        }


class Queue(RateLimiter):
    """At most ``size`` items inserted and not yet sampled; samples wait for an item.

    With ``rc.Fifo()`` and ``max_times_sampled=1`` the table is a queue: every
    window is delivered exactly once, oldest first.
    """

    def __init__(self, size: int) -> None:
        self.size = positive_int("size", size)
        super().__init__(1.0, 1, 0.0, float(size))

    def get_config(self) -> dict[str, Any]:
        return {"size": self.size}


class Stack(Queue):
    """As :class:`Queue` (pair it with ``rc.Lifo()`` and ``max_times_sampled=1``)."""


def rate_limiter_from_config(config: dict[str, Any] | None) -> RateLimiter | None:
    """Rebuilds a limiter from ``{"type": name, "config": {...}}`` (None stays None).

    Raises:
        InvalidArgumentError: an unknown type name or bad arguments.
    """
    if config is None:
        return None
    cls = _REGISTRY.get(config.get("type", ""))
    if cls is None:
        raise InvalidArgumentError(
            f"no rate limiter named {config.get('type')!r} (known: {sorted(_REGISTRY)})."
        )
    return cls(**config["config"])
