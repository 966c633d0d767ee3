"""Snapshots of a :class:`~recollect.table.Table`: its checkpoint state
(``state_dict``/``load_state_dict``: index, sampler, times sampled, RNG, counters) and its
:class:`~recollect.table.TableInfo` report, both read from the same counters.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from recollect.state.rng import decode_rng, encode_rng
from recollect.storage.base import ColumnSource
from recollect.table.info import TableInfo

if TYPE_CHECKING:
    from recollect.samplers.base import Sampler
    from recollect.table.rate_limiters import RateLimiter
    from recollect.windows import WindowIndex

__all__ = ["TableState"]


class TableState:
    """``state_dict``, ``load_state_dict`` and ``info`` of :class:`~recollect.table.Table`
    (a mixin)."""

    lock: threading.RLock
    cond: threading.Condition
    waiters: int
    rate_limiter: RateLimiter | None
    index: WindowIndex
    sampler: Sampler
    rng: np.random.Generator
    inserts: int
    samples: int
    num_envs: int
    max_length: int
    max_times_sampled: int
    track_times_sampled: bool
    _times_sampled: np.ndarray

    if TYPE_CHECKING:  # defined by Table and the other mixin

        @property
        def num_stored(self) -> int: ...

        def size(self, num_steps: int | None = None, within: bool | None = None) -> int: ...

        def _recheck_clocks(self) -> None: ...

    def info(self, sampler_config: dict[str, Any] | None = None) -> TableInfo:
        """A :class:`TableInfo` snapshot (``sampler_config``: the sampler's arguments)."""
        with self.lock:
            limiter = self.rate_limiter
            counters = self._counters()
            return TableInfo(
                size=self.size(),
                capacity=self.num_envs * self.max_length,
                num_stored=self.num_stored,
                num_episodes=len(self.index.live_ends()[0]),
                inserts=self.inserts,
                samples=self.samples,
                deletes=self.index.removed,
                samples_per_insert=self.samples / self.inserts if self.inserts else 0.0,
                max_times_sampled=self.max_times_sampled,
                rate_limiter=None if limiter is None else limiter.describe(),
                insert_blocked_s=counters["insert_blocked_s"],
                sample_blocked_s=counters["sample_blocked_s"],
                sampler={"type": self.sampler.name, "config": sampler_config or {}},
            )

    def state_dict(self) -> dict[str, Any]:
        """Index, sampler state, times sampled (``columns``: one count per slot, a ring
        array ``[num_envs, max_length]``) and RNG state (arrays and JSON values)."""
        with self.lock:
            return {
                "index": self.index.state_dict(),
                "sampler": self.sampler.state_dict(),
                "columns": {"times_sampled": np.ascontiguousarray(self._times_sampled.T)}
                if self.track_times_sampled
                else {},
                "rng": encode_rng(self.rng),
                "counters": self._counters(),
            }

    def _counters(self) -> dict[str, Any]:
        limiter = self.rate_limiter
        return {
            "inserts": self.inserts,
            "samples": self.samples,
            "deletes": self.index.removed,
            "insert_blocked_s": 0.0 if limiter is None else limiter.insert_blocked_s,
            "sample_blocked_s": 0.0 if limiter is None else limiter.sample_blocked_s,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (from a table of the same geometry).

        Raises:
            ValueError: the state does not fit this table.
        """
        with self.lock:
            self.index.load_state_dict(state["index"])
            self.sampler.load_state_dict(state["sampler"])
            source = state.get("columns", {}).get("times_sampled")
            if not self.track_times_sampled:
                source = None
            rows = np.zeros((self.num_envs, self.max_length), np.int32)  # ring layout
            if isinstance(source, ColumnSource):
                source.read_into(rows)
            elif source is not None:
                counts = np.asarray(source, np.int32)
                if counts.shape != rows.shape:
                    raise ValueError(
                        f"times_sampled has shape {counts.shape}; this table needs {rows.shape}."
                    )
                rows[...] = counts
            if self.track_times_sampled:
                self._times_sampled[...] = rows.T
            if (rng := decode_rng(state.get("rng"), "table state")) is not None:
                self.rng = rng
            counters = state.get("counters") or {}
            self.inserts = int(counters.get("inserts", 0))
            self.samples = int(counters.get("samples", 0))
            self.index.removed = int(counters.get("deletes", 0))
            if self.rate_limiter is not None:
                self.rate_limiter.insert_blocked_s = float(counters.get("insert_blocked_s", 0.0))
                self.rate_limiter.sample_blocked_s = float(counters.get("sample_blocked_s", 0.0))
            self._recheck_clocks()
            if self.waiters:
                self.cond.notify_all()
