"""``reverb.Table``: a named store of items with a sampler, remover and rate limiter.

The Table object is live: once a :class:`~recollect.reverb.server.Server`
hosts it, ``info``, ``can_sample`` and ``can_insert`` read the server's state,
as in Reverb. Its items are :class:`~recollect.reverb.items.Items`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from recollect.arguments import is_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import item_selectors, rate_limiters
from recollect.reverb import signature as _signature
from recollect.reverb.items import Items
from recollect.reverb.reverb_types import ProtoLike, TableInfo, selector_options
from recollect.reverb.store import ColumnStore


class Table:
    """A table of items.

    Args:
        name: the table's name (non-empty).
        sampler: how items are selected for sampling (``reverb.selectors.*``).
        remover: how an item is selected for removal when the table is full.
        max_size: the most items the table holds (>= 1).
        rate_limiter: the flow control between inserts and samples.
        max_times_sampled: an item is deleted after this many samples (< 1: never).
        extensions: accepted for compatibility; must be empty (none are implemented).
        signature: a nest of specs (``tf.TensorSpec`` or array specs) items must match.

    Raises:
        InvalidArgumentError (a ValueError): an empty name, ``max_size < 1``, extensions,
            or an unsupported signature leaf.
    """

    def __init__(
        self,
        name: str,
        sampler: item_selectors.Selector,
        remover: item_selectors.Selector,
        max_size: int,
        rate_limiter: rate_limiters.RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[Any] = (),
        signature: Any = None,
    ) -> None:
        if not name:
            raise InvalidArgumentError("name must be nonempty; give the table a name.")
        if not is_int(max_size, 1):
            raise InvalidArgumentError(f"max_size ({max_size}) must be a positive integer.")
        if extensions:
            raise InvalidArgumentError(
                f"table extensions are not supported by recollect.reverb; got {list(extensions)}. "
                "Remove them (see the 'From Reverb' page)."
            )
        if not isinstance(rate_limiter, rate_limiters.RateLimiter):
            raise InvalidArgumentError(
                f"rate_limiter must be a reverb.rate_limiters.RateLimiter; got {rate_limiter!r}."
            )
        self.name = name
        self.sampler = sampler
        self.remover = remover
        self.max_size = int(max_size)
        self.rate_limiter = rate_limiter
        self.max_times_sampled = int(max_times_sampled)
        self.extensions = tuple(extensions)
        self.signature = signature
        self.columns = _signature.columns(signature)
        self.items = Items(self, ColumnStore(), np.random.default_rng())

    @classmethod
    def queue(
        cls, name: str, max_size: int, extensions: Sequence[Any] = (), signature: Any = None
    ) -> Table:
        """A FIFO queue of ``max_size`` items: each sampled once; inserts block when full."""
        return cls(
            name=name,
            sampler=item_selectors.Fifo(),
            remover=item_selectors.Fifo(),
            max_size=max_size,
            max_times_sampled=1,
            rate_limiter=rate_limiters.Queue(max_size),
            extensions=extensions,
            signature=signature,
        )

    @classmethod
    def stack(
        cls, name: str, max_size: int, extensions: Sequence[Any] = (), signature: Any = None
    ) -> Table:
        """A LIFO stack of ``max_size`` items: each sampled once; inserts block when full."""
        return cls(
            name=name,
            sampler=item_selectors.Lifo(),
            remover=item_selectors.Lifo(),
            max_size=max_size,
            max_times_sampled=1,
            rate_limiter=rate_limiters.Stack(max_size),
            extensions=extensions,
            signature=signature,
        )

    @property
    def info(self) -> TableInfo:
        """The table's configuration and counters now."""
        items = self.items
        with items.cond:
            lim, cfg = items.limiter, self.rate_limiter
            rate_info = ProtoLike(
                samples_per_insert=cfg.samples_per_insert,
                min_diff=cfg.min_diff,
                max_diff=cfg.max_diff,
                min_size_to_sample=cfg.min_size_to_sample,
                insert_stats=ProtoLike(completed=lim.insert_completed, blocked=lim.insert_blocked),
                sample_stats=ProtoLike(completed=lim.sample_completed, blocked=lim.sample_blocked),
            )
            return TableInfo(
                name=self.name,
                sampler_options=selector_options(self.sampler),
                remover_options=selector_options(self.remover),
                max_size=self.max_size,
                max_times_sampled=self.max_times_sampled,
                rate_limiter_info=rate_info,
                signature=self.signature,
                current_size=items.size,
                num_episodes=len(items.episodes),
                num_deleted_episodes=items.num_deleted_episodes,
                num_unique_samples=items.num_unique_samples,
                table_worker_time=ProtoLike(sleeping_ms=0),
            )

    def can_sample(self, num_samples: int) -> bool:
        """Whether ``num_samples`` samples would proceed now without blocking."""
        with self.items.cond:
            return self.items.limiter.sampleable(self.items.size) >= num_samples

    def can_insert(self, num_inserts: int) -> bool:
        """Whether ``num_inserts`` inserts would proceed now without blocking."""
        with self.items.cond:
            return self.items.limiter.insertable(self.items.size) >= num_inserts

    def replace(
        self,
        name: str | None = None,
        sampler: item_selectors.Selector | None = None,
        remover: item_selectors.Selector | None = None,
        max_size: int | None = None,
        rate_limiter: rate_limiters.RateLimiter | None = None,
        max_times_sampled: int | None = None,
        extensions: Sequence[Any] | None = None,
        signature: Any = None,
    ) -> Table:
        """A new (empty) table with this one's configuration, except what is given."""

        def pick(a: Any, b: Any) -> Any:
            return a if a is not None else b

        return Table(
            name=pick(name, self.name),
            sampler=pick(sampler, self.sampler),
            remover=pick(remover, self.remover),
            max_size=pick(max_size, self.max_size),
            rate_limiter=pick(rate_limiter, self.rate_limiter),
            max_times_sampled=pick(max_times_sampled, self.max_times_sampled),
            extensions=pick(extensions, self.extensions),
            signature=pick(signature, self.signature),
        )

    def __repr__(self) -> str:
        return (
            f"Table(name={self.name!r}, sampler={self.sampler}, remover={self.remover}, "
            f"max_size={self.max_size}, max_times_sampled={self.max_times_sampled}, "
            f"rate_limiter={self.rate_limiter!r}, size={self.items.size})"
        )
