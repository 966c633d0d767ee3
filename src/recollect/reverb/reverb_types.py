"""Table metadata (``reverb.reverb_types``): :class:`TableInfo` and proto-like options.

Reverb returns protobuf messages for ``sampler_options``, ``remover_options`` and
``rate_limiter_info``; users read their fields and call ``HasField``. Here they
are :class:`ProtoLike` objects with the same field names (no protobuf needed).
"""

from __future__ import annotations

import dataclasses
from typing import Any


class ProtoLike:
    """A read-only record with protobuf-style ``HasField`` and text ``repr``."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def HasField(self, name: str) -> bool:
        """True when ``name`` is a set sub-message or a set (non-default) scalar."""
        value = self.__dict__.get(name)
        return value is not None and value is not False and value != 0

    def WhichOneof(self, _group: str) -> str | None:
        for name in ("fifo", "lifo", "uniform", "prioritized", "heap"):
            if self.HasField(name):
                return name
        return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProtoLike) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        lines = []
        for name, value in self.__dict__.items():
            if value is None:
                continue
            if isinstance(value, ProtoLike):
                inner = repr(value).strip().replace("\n", "\n  ")
                lines.append(f"{name} {{\n  {inner}\n}}" if inner else f"{name} {{\n}}")
            else:
                lines.append(f"{name}: {str(value).lower() if isinstance(value, bool) else value}")
        return "\n".join(lines) + ("\n" if lines else "")


def selector_options(selector: Any) -> ProtoLike:
    """The ``KeyDistributionOptions``-like record of a selector."""
    kind = selector.kind
    if kind == "prioritized":
        return ProtoLike(prioritized=ProtoLike(priority_exponent=selector.priority_exponent))
    if kind == "heap":
        return ProtoLike(heap=ProtoLike(min_heap=selector.min_heap), is_deterministic=True)
    if kind in ("fifo", "lifo"):
        return ProtoLike(**{kind: True}, is_deterministic=True)
    return ProtoLike(uniform=True)


@dataclasses.dataclass
class TableInfo:
    """A table's configuration and counters (Reverb's fields).

    ``rate_limiter_info`` has ``samples_per_insert``, ``min_diff``, ``max_diff``,
    ``min_size_to_sample``, ``insert_stats`` and ``sample_stats`` (each with
    ``completed`` and ``blocked`` counts).
    """

    name: str
    sampler_options: ProtoLike
    remover_options: ProtoLike
    max_size: int
    max_times_sampled: int
    rate_limiter_info: ProtoLike
    signature: Any
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: ProtoLike


__all__ = ["ProtoLike", "TableInfo", "selector_options"]
