"""A table's rate-limiter counters and the closed-form counts it allows now."""

from __future__ import annotations

import math

from recollect.reverb.rate_limiters import RateLimiter


class LimiterState:
    """Counts inserts, samples and deletes of one table against its :class:`RateLimiter`."""

    def __init__(self, config: RateLimiter) -> None:
        self.config = config
        self.inserts = 0
        self.samples = 0
        self.deletes = 0
        self.insert_completed = 0
        self.sample_completed = 0
        self.insert_blocked = 0
        self.sample_blocked = 0

    def reset(self) -> None:
        self.inserts = self.samples = self.deletes = 0

    def insertable(self, size: int) -> int:
        """How many inserts may proceed now (0: an insert blocks)."""
        c = self.config
        free = max(0, c.min_size_to_sample - size)  # below min size inserts run free
        room = (c.max_diff + self.samples) / c.samples_per_insert - self.inserts
        by_diff = math.floor(room + 1e-9) if math.isfinite(room) else 1 << 62
        return max(free, by_diff, 0)

    def sampleable(self, size: int) -> int:
        """How many samples may proceed now (0: a sample blocks)."""
        c = self.config
        if size < c.min_size_to_sample or size <= 0:
            return 0
        room = self.inserts * c.samples_per_insert - self.samples - c.min_diff
        if not math.isfinite(room):
            return 1 << 62
        return max(0, math.floor(room + 1e-9))
