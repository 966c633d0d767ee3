"""TableInfo: a snapshot of a table's size, counters, rate limiter and sampler."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["TableInfo"]


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """What ``ReplayBuffer.info()`` reports (Reverb: ``TableInfo``).

    Attributes:
        size: sampleable windows (of ``sequence_length``, or single steps).
        capacity: steps the table holds at most (all rows).
        num_stored: steps stored now.
        num_episodes: episode ends stored (0 without an ``is_last`` leaf).
        inserts: steps written since construction or the last ``clear``.
        samples: windows drawn since then.
        deletes: windows removed by ``max_times_sampled`` or ``delete``.
        samples_per_insert: observed ``samples / inserts`` (0.0 before any insert).
        max_times_sampled: removal threshold (0: never removed).
        rate_limiter: the limiter's type, arguments and bounds, or None.
        insert_blocked_s: seconds inserts waited on the rate limiter.
        sample_blocked_s: seconds samples waited on it.
        sampler: ``{"type": name, "config": arguments}`` of the sampler.
        lost_steps: steps a replay-service shard lost in crashes (inserted after its
            last checkpoint); 0 for a local buffer.
        leased_rows: rows a replay-service shard has leased to writers; 0 locally.
        shards: per-shard :class:`TableInfo` of a table served in shards (the
            fields above are then their sums); empty for a local buffer.
    """

    size: int
    capacity: int
    num_stored: int
    num_episodes: int
    inserts: int
    samples: int
    deletes: int
    samples_per_insert: float
    max_times_sampled: int
    rate_limiter: dict[str, Any] | None
    insert_blocked_s: float
    sample_blocked_s: float
    sampler: dict[str, Any]
    lost_steps: int = 0
    leased_rows: int = 0
    shards: tuple[TableInfo, ...] = ()

    def lines(self) -> list[str]:
        """Human-readable ``name  value`` lines (``recollect inspect``)."""
        limiter = "none" if self.rate_limiter is None else self._limiter()
        return [
            f"size         {self.size} sampleable windows",
            f"inserts      {self.inserts}  samples {self.samples}  deletes {self.deletes}  "
            f"samples/insert {self.samples_per_insert:.3f}",
            f"limiter      {limiter}",
            f"blocked      inserts {self.insert_blocked_s:.3f}s  samples "
            f"{self.sample_blocked_s:.3f}s",
            f"max sampled  {self.max_times_sampled or 'unlimited'}",
            *(
                [
                    f"shards       {len(self.shards)}  lost steps {self.lost_steps}  leased rows "
                    f"{self.leased_rows}"
                ]
                if self.shards
                else []
            ),
        ]

    def _limiter(self) -> str:
        r = self.rate_limiter or {}
        args = ", ".join(f"{k}={v!r}" for k, v in r.get("config", {}).items())
        return (
            f"{r.get('type')}({args}) [min_diff={r.get('min_diff'):g}, max_diff="
            f"{r.get('max_diff'):g}]"
        )
