"""How a table's configuration is split into shard configurations."""

from __future__ import annotations

import math
from typing import Any

from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError

__all__ = ["SHARDABLE_SAMPLERS", "shard_config"]

#: samplers whose draw a client can split exactly over shards (by weight)
SHARDABLE_SAMPLERS = ("Uniform", "Prioritized")


def shard_config(config: dict[str, Any], num_shards: int, shard: int, table: str) -> dict[str, Any]:
    """The ``ReplayBuffer.config()`` of shard ``shard`` of a table of ``config``.

    Rows and capacity are split evenly; a rate limiter keeps its samples per
    insert and gets ``1 / num_shards`` of its minimum size (rounded up) and of
    its allowed balance, as each shard sees that share of inserts and samples.

    Raises:
        InvalidArgumentError: ``num_envs`` not a multiple of ``num_shards``, or a
            sampler whose draw cannot be split over shards (FIFO, LIFO, heaps).
    """
    num_shards = positive_int("num_shards", num_shards)
    if num_shards == 1:
        return {**config, "shard": shard}
    num_envs = config["num_envs"]
    if num_envs % num_shards:
        raise InvalidArgumentError(
            f"table {table!r}: num_envs={num_envs} must be a multiple of num_shards={num_shards} "
            "(each shard holds num_envs / num_shards rows). Build the table with num_envs="
            f"{num_shards * max(1, round(num_envs / num_shards))}."
        )
    sampler = config["sampler"]["type"]
    if sampler not in SHARDABLE_SAMPLERS:
        raise InvalidArgumentError(
            f"table {table!r}: {sampler} sampling cannot be split exactly over shards (only "
            f"{', '.join(SHARDABLE_SAMPLERS)}); serve it with num_shards=1."
        )
    out = {
        **config,
        "num_envs": num_envs // num_shards,
        "capacity": config["capacity"] // num_shards,
        "shard": shard,
    }
    limiter = config.get("rate_limiter")
    if limiter is not None:
        out["rate_limiter"] = _split_limiter(limiter, num_shards)
    return out


def _split_limiter(limiter: dict[str, Any], n: int) -> dict[str, Any]:
    kind, args = limiter["type"], dict(limiter["config"])
    if "min_size_to_sample" in args:
        args["min_size_to_sample"] = max(1, math.ceil(args["min_size_to_sample"] / n))
    if kind == "SampleToInsertRatio":  # never narrower than the limiter accepts
        buffer, need = args["error_buffer"], max(1.0, float(args["samples_per_insert"]))
        if isinstance(buffer, list | tuple):
            lo, hi = buffer[0] / n, buffer[1] / n
            if hi - lo < 2 * need:
                mid = (lo + hi) / 2
                lo, hi = mid - need, mid + need
            args["error_buffer"] = [lo, hi]
        else:
            args["error_buffer"] = max(buffer / n, need)
    elif kind == "RateLimiter":
        args["min_diff"] = args["min_diff"] / n
        args["max_diff"] = args["max_diff"] / n
    elif kind in ("Queue", "Stack"):
        args["size"] = max(1, math.ceil(args["size"] / n))
    return {"type": kind, "config": args}
