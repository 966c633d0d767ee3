"""A table's items: keys, priorities, counts and row references, under one condition.

Items live in slots ``0..max_size-1``. A key is ``(counter << shift) | slot``
(``shift`` = bits of ``max_size``): the slot of a key is one mask away and a
stale key (its slot reused) is detected by comparing ``key[slot]``, so priority
updates and deletes of many keys are a few array operations and keys of removed
items are ignored, as Reverb does. An item's data is a row of int64 row indices
into the server's column pools, one ``[max_size, width]`` array per item layout
(the columns' pools, lengths and squeeze flags); items of one writer share a
layout, so a sample gathers each column with one fancy index.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from recollect.reverb import item_selectors
from recollect.reverb import selection as _selection
from recollect.reverb.errors import RateLimiterTimeoutError
from recollect.reverb.limiter import LimiterState
from recollect.reverb.rate_limiters import RateLimiter
from recollect.reverb.store import ColumnStore, lazy_zeros


@dataclass(frozen=True)
class Layout:
    """Column pools, lengths and squeeze flags of an item, and its row offsets."""

    pools: tuple[int, ...]
    lengths: tuple[int, ...]
    squeeze: tuple[bool, ...]

    @property
    def width(self) -> int:
        return sum(self.lengths)

    @property
    def offsets(self) -> list[int]:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(int).tolist()


class TableConfig(Protocol):
    """What :class:`Items` reads of its table (``reverb.Table`` has these attributes)."""

    name: str
    max_size: int
    max_times_sampled: int
    sampler: item_selectors.Selector
    remover: item_selectors.Selector
    rate_limiter: RateLimiter


class Items:
    """The item arrays and flow control of one table (see the module docstring)."""

    def __init__(self, table: TableConfig, store: ColumnStore, rng: np.random.Generator) -> None:
        self.cfg = table
        self.store = store
        self.rng = rng
        n = self.max_size = int(table.max_size)
        self.shift = max(1, int(n - 1).bit_length())
        self.cond = threading.Condition()
        self.key = np.full(n, -1, np.int64)
        # the per-slot arrays take memory as slots are used (lazy_zeros)
        self.priority = lazy_zeros((n,), np.float64)
        self.times_sampled = lazy_zeros((n,), np.int32)
        self.seq = lazy_zeros((n,), np.int64)
        self.layout_of = lazy_zeros((n,), np.int32)
        self.episode = lazy_zeros((n,), np.int64)
        self.free = np.arange(n - 1, -1, -1, dtype=np.int64)  # a stack: free[:n_free]
        self.n_free = n
        self.counter = 0
        self.layouts: list[Layout] = []
        self.layout_ids: dict[Layout, int] = {}
        self.rows: list[np.ndarray] = []
        self.episodes: dict[int, int] = {}
        self.num_deleted_episodes = 0
        self.num_unique_samples = 0
        self.limiter = LimiterState(table.rate_limiter)
        self.sampler = _selection.build(table.sampler, n, self.priority, self.seq)
        self.remover = _selection.build(table.remover, n, self.priority, self.seq)

    @property
    def size(self) -> int:
        return self.max_size - self.n_free

    # ---------------------------------------------------------------- insert
    def layout_id(self, layout: Layout) -> int:
        if layout not in self.layout_ids:
            self.layout_ids[layout] = len(self.layouts)
            self.layouts.append(layout)
            # row indices of pools (< store.MAX_ROWS): int32 halves the index's bytes
            self.rows.append(lazy_zeros((self.max_size, layout.width), np.int32))
        return self.layout_ids[layout]

    def _wait(self, ready, timeout_s: float | None, what: str) -> int:
        """Waits under ``cond`` until ``ready()`` > 0; returns it (raises past ``timeout_s``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        allowed = ready()
        blocked = False
        while allowed <= 0:
            if not blocked:
                blocked = True
                if what == "insert":
                    self.limiter.insert_blocked += 1
                else:
                    self.limiter.sample_blocked += 1
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise RateLimiterTimeoutError(
                    f"Rate Limiter: Timeout exceeded before the right to {what} was acquired "
                    f"in table '{self.cfg.name}' (waited {timeout_s} s). The table's rate "
                    f"limiter ({self.cfg.rate_limiter!r}) blocks {what}s until the other side "
                    "catches up; sample/insert more, or raise the timeout."
                )
            self.cond.wait(left if left is None else min(left, 1.0))
            allowed = ready()
        return allowed

    def insert(
        self,
        layout: Layout,
        rows: np.ndarray,
        priorities: np.ndarray,
        episodes: np.ndarray,
        timeout_s: float | None,
    ) -> int:
        """Inserts ``len(priorities)`` items whose data are ``rows`` ``[n, width]``, blocking
        on the rate limiter; returns how many went in (fewer than given when ``timeout_s``
        passed first: the first ones stay inserted, the caller keeps the rest)."""
        done = 0
        n = len(priorities)
        with self.cond:
            lid = self.layout_id(layout)
            while done < n:
                try:
                    allowed = self._wait(
                        lambda: self.limiter.insertable(self.size), timeout_s, "insert"
                    )
                except RateLimiterTimeoutError:
                    return done
                k = min(allowed, n - done, self.max_size)
                self.insert_now(
                    lid,
                    rows[done : done + k],
                    priorities[done : done + k],
                    episodes[done : done + k],
                )
                done += k
                self.cond.notify_all()
        return done

    def insert_now(
        self, lid: int, rows: np.ndarray, prio: np.ndarray, episodes: np.ndarray
    ) -> None:
        k = len(prio)
        over = self.size + k - self.max_size
        if over > 0:
            victims, _ = (
                self.remover.draw(over, self.rng)
                if self.remover.deterministic
                else (self._distinct_draw(self.remover, over), None)
            )
            self._delete(victims)
        slots = self.free[self.n_free - k : self.n_free][::-1].copy()
        self.n_free -= k
        counters = self.counter + np.arange(k, dtype=np.int64)
        self.counter += k
        self.key[slots] = (counters << self.shift) | slots
        self.priority[slots] = prio
        self.times_sampled[slots] = 0
        self.seq[slots] = counters
        self.layout_of[slots] = lid
        self.episode[slots] = episodes
        self.rows[lid][slots] = rows
        layout = self.layouts[lid]
        offs = layout.offsets
        with self.store.lock:
            for c, pool in enumerate(layout.pools):
                self.store.pools[pool].add_refs(rows[:, offs[c] : offs[c + 1]], +1)
        self.sampler.insert(slots)
        self.remover.insert(slots)
        self.limiter.inserts += k
        self.limiter.insert_completed += k
        eps, counts = np.unique(episodes, return_counts=True)
        for e, c in zip(eps.tolist(), counts.tolist(), strict=True):  # distinct episodes only
            self.episodes[e] = self.episodes.get(e, 0) + c

    def _distinct_draw(self, selection: _selection.Selection, n: int) -> np.ndarray:
        """``n`` distinct live slots drawn by a stochastic selection (remover use)."""
        if n >= self.size:
            return selection.dense.live().copy()
        picked = np.zeros(0, np.int64)
        while len(picked) < n:
            more, _ = selection.draw(2 * (n - len(picked)), self.rng)
            picked = np.concatenate([picked, more])
            _, first = np.unique(picked, return_index=True)
            picked = picked[np.sort(first)]
        return picked[:n]

    def _delete(self, slots: np.ndarray) -> None:
        """Removes distinct live ``slots`` (releases their rows, counts deletes)."""
        if len(slots) == 0:
            return
        self.sampler.delete(slots)
        self.remover.delete(slots)
        lids = self.layout_of[slots]
        with self.store.lock:
            for lid in np.unique(lids).tolist():
                layout = self.layouts[lid]
                rows = self.rows[lid][slots[lids == lid]]
                offs = layout.offsets
                for c, pool in enumerate(layout.pools):
                    self.store.pools[pool].add_refs(rows[:, offs[c] : offs[c + 1]], -1)
        self.key[slots] = -1
        self.free[self.n_free : self.n_free + len(slots)] = slots
        self.n_free += len(slots)
        self.limiter.deletes += len(slots)
        eps, counts = np.unique(self.episode[slots], return_counts=True)
        for e, c in zip(eps.tolist(), counts.tolist(), strict=True):
            left = self.episodes.get(e, 0) - c
            if left <= 0:
                self.episodes.pop(e, None)
                self.num_deleted_episodes += 1
            else:
                self.episodes[e] = left

    # ---------------------------------------------------------------- sample
    def sample(self, n: int, timeout_s: float | None) -> dict:
        """Samples between 1 and ``n`` items (as many as the limiter allows now; blocks
        until one is allowed). Returns the info arrays and the gathered column groups."""
        with self.cond:
            allowed = self._wait(lambda: self.limiter.sampleable(self.size), timeout_s, "sample")
            k = min(n, allowed)
            slots, prob = self._draw(k)
            k = len(slots)
            table_size = self.size
            rank = _occurrence_rank(slots)
            before = self.times_sampled[slots]
            times = before + rank + 1
            np.add.at(self.times_sampled, slots, 1)
            self.num_unique_samples += int(np.count_nonzero((before == 0) & (rank == 0)))
            info = {
                "key": self.key[slots].astype(np.uint64),
                "probability": prob.astype(np.float64),
                "table_size": np.full(k, table_size, np.int64),
                "priority": self.priority[slots].copy(),
                "times_sampled": times.astype(np.int32),
            }
            groups = self._gather(slots)
            mts = self.cfg.max_times_sampled
            if mts > 0:
                done = np.unique(slots)
                self._delete(done[self.times_sampled[done] >= mts])
            self.limiter.samples += k
            self.limiter.sample_completed += k
            self.cond.notify_all()
        return {"info": info, "groups": groups}

    def _draw(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        mts = self.cfg.max_times_sampled
        if self.sampler.deterministic:
            if mts <= 0:
                first, _ = self.sampler.draw(1, self.rng)
                return np.repeat(first, k), np.ones(k)
            cand, _ = self.sampler.draw(k, self.rng)
            left = mts - self.times_sampled[cand]
            slots = np.repeat(cand, left)[:k]
            return slots, np.ones(len(slots))
        slots, prob = self.sampler.draw(k, self.rng)
        if mts > 0:
            rank = _occurrence_rank(slots)
            over = self.times_sampled[slots] + rank >= mts
            if over.any():  # rare: a draw past max_times_sampled; keep the allowed prefix
                cut = int(np.argmax(over))
                slots, prob = slots[:cut], prob[:cut]
                if cut == 0:  # draw one at a time, as Reverb does
                    return self.sampler.draw(1, self.rng)
        return slots, prob

    def _gather(self, slots: np.ndarray) -> list[dict]:
        """Per layout among ``slots``: the batch positions and each column's data."""
        lids = self.layout_of[slots]
        groups = []
        with self.store.lock:
            for lid in np.unique(lids).tolist():
                where = np.flatnonzero(lids == lid)
                layout = self.layouts[lid]
                rows = self.rows[lid][slots[where]]
                offs = layout.offsets
                columns = []
                for c, pool in enumerate(layout.pools):
                    data = self.store.pools[pool].data[rows[:, offs[c] : offs[c + 1]]]
                    columns.append(data[:, 0] if layout.squeeze[c] else data)
                groups.append({"index": where, "columns": columns})
        return groups

    # ---------------------------------------------------------------- mutate
    def live_slots(self, keys: np.ndarray) -> np.ndarray:
        """The slots of those ``keys`` that are still in the table."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        slots = keys & ((1 << self.shift) - 1)
        ok = (keys >= 0) & (slots < self.max_size)
        slots, keys = slots[ok], keys[ok]
        return slots[self.key[slots] == keys]

    def mutate(self, keys: np.ndarray, priorities: np.ndarray, deletes: np.ndarray) -> None:
        """Sets priorities of live ``keys`` (unknown keys ignored), then deletes ``deletes``."""
        with self.cond:
            keys = np.asarray(keys, np.int64).reshape(-1)
            prio = np.asarray(priorities, np.float64).reshape(-1)
            slots = keys & ((1 << self.shift) - 1)
            ok = (keys >= 0) & (slots < self.max_size)
            ok[ok] = self.key[slots[ok]] == keys[ok]
            if ok.any():
                self.priority[slots[ok]] = prio[ok]
                self.sampler.update(slots[ok])
                self.remover.update(slots[ok])
            gone = np.unique(self.live_slots(deletes))
            self._delete(gone)
            self.cond.notify_all()

    def reset(self) -> None:
        """Removes every item and resets the limiter's counters."""
        with self.cond:
            live = self.sampler.dense.live().copy()
            self._delete(live)
            self.limiter = LimiterState(self.limiter.config)
            self.episodes.clear()
            self.num_deleted_episodes = 0
            self.num_unique_samples = 0
            self.cond.notify_all()


def _occurrence_rank(slots: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same slot."""
    if len(slots) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(slots, kind="stable")
    s = slots[order]
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    group_start = np.repeat(starts, np.diff(np.concatenate([starts, [len(s)]])))
    rank = np.empty(len(slots), np.int64)
    rank[order] = np.arange(len(s)) - group_start
    return rank
