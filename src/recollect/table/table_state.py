"""Snapshots of a :class:`~recollect.table.Table`: its checkpoint state
(``state_dict``/``load_state_dict``: index, sampler, times sampled, RNG, counters) and its
:class:`~recollect.table.TableInfo` report, both read from the same counters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.state.rng import decode_rng, encode_rng
from recollect.storage.base import ColumnSource
from recollect.table.info import TableInfo

__all__ = ["info", "load_state_dict", "state_dict"]


def info(table: Any, sampler_config: dict[str, Any] | None = None) -> TableInfo:
    """A :class:`TableInfo` snapshot (``sampler_config``: the sampler's arguments)."""
    with table.lock:
        limiter = table.rate_limiter
        counters = _counters(table)
        return TableInfo(
            size=table.size(),
            capacity=table.num_envs * table.max_length,
            num_stored=table.num_stored,
            num_episodes=len(table.index.live_ends()[0]),
            inserts=table.inserts,
            samples=table.samples,
            deletes=table.index.removed,
            samples_per_insert=table.samples / table.inserts if table.inserts else 0.0,
            max_times_sampled=table.max_times_sampled,
            rate_limiter=None if limiter is None else limiter.describe(),
            insert_blocked_s=counters["insert_blocked_s"],
            sample_blocked_s=counters["sample_blocked_s"],
            sampler={"type": table.sampler.name, "config": sampler_config or {}},
        )


def state_dict(table: Any) -> dict[str, Any]:
    """Index, sampler state, times sampled (``columns``: one count per slot, a ring
    array ``[num_envs, max_length]``) and RNG state (arrays and JSON values)."""
    with table.lock:
        return {
            "index": table.index.state_dict(),
            "sampler": table.sampler.state_dict(),
            "columns": {"times_sampled": np.ascontiguousarray(_ring(table).T)}
            if table.track_times_sampled
            else {},
            "rng": encode_rng(table.rng),
            "counters": _counters(table),
        }


def _counters(table: Any) -> dict[str, Any]:
    """The table's checkpointed counters (inserts, samples, deletes, blocked seconds)."""
    limiter = table.rate_limiter
    return {
        "inserts": table.inserts,
        "samples": table.samples,
        "deletes": table.index.removed,
        "insert_blocked_s": 0.0 if limiter is None else limiter.insert_blocked_s,
        "sample_blocked_s": 0.0 if limiter is None else limiter.sample_blocked_s,
    }


def load_state_dict(table: Any, state: dict[str, Any]) -> None:
    """Restores :meth:`state_dict` output (from a table of the same geometry).

    Raises:
        ValueError: the state does not fit this table.
    """
    with table.lock:
        table.index.load_state_dict(state["index"])
        table.sampler.load_state_dict(state["sampler"])
        source = state.get("columns", {}).get("times_sampled")
        if not table.track_times_sampled:
            source = None
        rows = np.zeros((table.num_envs, table.max_length), np.int32)  # ring layout
        if isinstance(source, ColumnSource):
            source.read_into(rows)
        elif source is not None:
            counts = np.asarray(source, np.int32)
            if counts.shape != rows.shape:
                raise ValueError(
                    f"times_sampled has shape {counts.shape}; this table needs {rows.shape}."
                )
            rows[...] = counts
        if table.track_times_sampled:
            _ring(table)[...] = rows.T
        if (rng := decode_rng(state.get("rng"), "table state")) is not None:
            table.rng = rng
        counters = state.get("counters") or {}
        table.inserts = int(counters.get("inserts", 0))
        table.samples = int(counters.get("samples", 0))
        table.index.removed = int(counters.get("deletes", 0))
        if table.rate_limiter is not None:
            table.rate_limiter.insert_blocked_s = float(counters.get("insert_blocked_s", 0.0))
            table.rate_limiter.sample_blocked_s = float(counters.get("sample_blocked_s", 0.0))
        table.recheck_clocks()
        if table.waiters:
            table.cond.notify_all()


def _ring(table: Any) -> np.ndarray:
    """int32 ``[max_length, num_envs]``: the table's times-sampled counts (a view; tables
    with ``track_times_sampled``)."""
    return table.times_sampled.reshape(table.max_length, table.num_envs)
