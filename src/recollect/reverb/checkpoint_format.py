"""A server's state as a recollect checkpoint directory (our format; atomic, npy, no pickle).

Saved: every pool's rows and, per table, its item arrays, layouts, limiter
counters and episode counts. Writers' streams are not saved (as in Reverb, a
writer does not survive a restart), so block references are recomputed from the
items at load. Selections are rebuilt from the live slots in insertion order.
Object (bytes) pools are saved as one byte buffer plus offsets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.reverb.items import Layout
from recollect.reverb.store import BLOCK_ROWS, Pool
from recollect.state.files import read_state, write_checkpoint

KIND = "recollect.reverb.Server"


def _pool_state(pool: Pool) -> dict[str, Any]:
    if pool.dtype.kind != "O":
        return {"data": pool.data}
    flat = [b"" if v is None else bytes(v) for v in pool.data.reshape(-1)]
    lengths = np.fromiter((len(v) for v in flat), np.int64, len(flat))
    return {
        "bytes": np.frombuffer(b"".join(flat), np.uint8).copy(),
        "lengths": lengths,
    }


def save(core: Any, path: str | Path) -> Path:
    """Writes ``core``'s state to ``path`` (atomically); returns the path."""
    with core.store.lock:
        pools_cfg = [{"dtype": p.dtype.str, "shape": list(p.shape)} for p in core.store.pools]
        state: dict[str, Any] = {
            "pools": {str(i): _pool_state(p) for i, p in enumerate(core.store.pools)}
        }
    tables_cfg: dict[str, Any] = {}
    state["tables"] = {}
    for name, table in core.tables.items():
        items = table.items
        with items.cond:
            tables_cfg[name] = {
                "max_size": items.max_size,
                "n_free": items.n_free,
                "counter": items.counter,
                "layouts": [
                    [list(lay.pools), list(lay.lengths), list(lay.squeeze)] for lay in items.layouts
                ],
                "limiter": [
                    items.limiter.inserts,
                    items.limiter.samples,
                    items.limiter.deletes,
                    items.limiter.insert_completed,
                    items.limiter.sample_completed,
                ],
                "num_deleted_episodes": items.num_deleted_episodes,
                "num_unique_samples": items.num_unique_samples,
            }
            state["tables"][name] = {
                "key": items.key.copy(),
                "priority": items.priority.copy(),
                "times_sampled": items.times_sampled.copy(),
                "seq": items.seq.copy(),
                "layout_of": items.layout_of.copy(),
                "episode": items.episode.copy(),
                "free": items.free.copy(),
                "episode_ids": np.fromiter(items.episodes.keys(), np.int64, len(items.episodes)),
                "episode_counts": np.fromiter(
                    items.episodes.values(), np.int64, len(items.episodes)
                ),
                "rows": {str(i): r.copy() for i, r in enumerate(items.rows)},
            }
    config = {"pools": pools_cfg, "tables": tables_cfg}
    return write_checkpoint(path, KIND, config, state)


def _restore_pool(cfg: dict[str, Any], st: dict[str, Any]) -> Pool:
    pool = Pool(np.dtype(cfg["dtype"]), tuple(cfg["shape"]))
    if pool.dtype.kind == "O":
        lengths = np.asarray(st["lengths"])
        raw = np.asarray(st["bytes"]).tobytes()
        ends = np.cumsum(lengths)
        data = np.empty(len(lengths), object)
        data[:] = [raw[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)]
        pool.data = data.reshape(-1, *pool.shape)
    else:
        pool.data = np.array(st["data"])
    pool.refs = np.zeros(len(pool.data) // BLOCK_ROWS, np.int64)
    return pool


def load(core: Any, path: str | Path) -> None:
    """Restores the state at ``path`` into ``core`` (tables matched by name).

    Raises:
        CheckpointError: not a server checkpoint, or a table too small for its items.
    """
    saved = read_state(path)
    if saved.kind != KIND:
        raise CheckpointError(f"{path} holds a {saved.kind!r} checkpoint, not a reverb server's.")
    cfg, st = saved.config, saved.state
    with core.store.lock:
        core.store.restore_pools(
            [_restore_pool(c, st["pools"][str(i)]) for i, c in enumerate(cfg["pools"])]
        )
    for name, tcfg in cfg["tables"].items():
        table = core.tables.get(name)
        if table is None:
            continue
        if tcfg["max_size"] != table.max_size:
            raise CheckpointError(
                f"table '{name}' was saved with max_size={tcfg['max_size']} but the server's "
                f"has max_size={table.max_size}; give the table its saved max_size."
            )
        _load_table(core, table.items, tcfg, st["tables"][name])
    with core.store.lock:
        for pool in core.store.pools:
            pool.free = np.flatnonzero(pool.refs == 0)[::-1].tolist()


def _load_table(core: Any, items: Any, cfg: dict[str, Any], st: dict[str, Any]) -> None:
    with items.cond:
        for name in ("key", "priority", "times_sampled", "seq", "layout_of", "episode", "free"):
            getattr(items, name)[:] = st[name]
        items.n_free = int(cfg["n_free"])
        items.counter = int(cfg["counter"])
        items.layouts, items.layout_ids, items.rows = [], {}, []
        for i, (pools, lengths, squeeze) in enumerate(cfg["layouts"]):
            items.layout_id(Layout(tuple(pools), tuple(lengths), tuple(bool(s) for s in squeeze)))
            items.rows[i][:] = st["rows"][str(i)]
        lim = items.limiter
        (lim.inserts, lim.samples, lim.deletes, lim.insert_completed, lim.sample_completed) = (
            int(v) for v in cfg["limiter"]
        )
        items.num_deleted_episodes = int(cfg["num_deleted_episodes"])
        items.num_unique_samples = int(cfg["num_unique_samples"])
        items.episodes = dict(
            zip(
                np.asarray(st["episode_ids"]).tolist(),
                np.asarray(st["episode_counts"]).tolist(),
                strict=True,
            )
        )
        live = np.flatnonzero(items.key >= 0)
        live = live[np.argsort(items.seq[live], kind="stable")]
        items.sampler.clear()
        items.remover.clear()
        items.sampler.insert(live)
        items.remover.insert(live)
        with core.store.lock:
            lids = items.layout_of[live]
            for lid, layout in enumerate(items.layouts):
                rows = items.rows[lid][live[lids == lid]]
                offs = layout.offsets
                for c, pool in enumerate(layout.pools):
                    core.store.pools[pool].add_refs(rows[:, offs[c] : offs[c + 1]], +1)
