"""Loading a dm-reverb 0.14 checkpoint (read by ``recollect.state.reverb``) into a server.

Each table of the checkpoint fills the server's table of the same name: items in
insertion order with their priorities and ``times_sampled``, the rate limiter's
counters and the episode counts. Every item column is stored as one row of its
full shape (squeezed), so an item samples back exactly the arrays Reverb would
return. Items get new keys (ours are ``(counter << bits) | slot``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.reverb.items import Layout


def load_into_server(core: Any, directory: Path) -> None:
    """Restores every table of the dm-reverb checkpoint at ``directory`` found in ``core``.

    Raises:
        CheckpointError: a table holds more items than the server's table of that name.
    """
    from recollect.state.reverb import read_checkpoint

    checkpoint = read_checkpoint(directory)
    for saved in checkpoint.tables:
        table = core.tables.get(saved.name)
        if table is None:
            continue
        if len(saved.items) > table.max_size:
            raise CheckpointError(
                f"{directory}: table '{saved.name}' holds {len(saved.items)} items but the "
                f"server's table has max_size={table.max_size}; raise it."
            )
        _load_table(core, table.items, saved)


def _load_table(core: Any, items: Any, saved: Any) -> None:
    runs: list[tuple[tuple, list[Any]]] = []
    for item in saved.items:  # consecutive items of one column layout form a run
        key = tuple((a.dtype.str, a.shape) for a in item.data)
        if not runs or runs[-1][0] != key:
            runs.append((key, []))
        runs[-1][1].append(item)
    with items.cond:
        for key, run in runs:
            stream = core.store.open_stream()  # one per run: its columns start at step 0
            try:
                rows, pools = [], []
                for c in range(len(key)):
                    core.store.append(stream, c, 0, np.stack([it.data[c] for it in run]))
                    pool_id, r = core.store.rows(stream, c, np.arange(len(run)))
                    rows.append(r)
                    pools.append(pool_id)
                layout = Layout(tuple(pools), (1,) * len(pools), (True,) * len(pools))
                episodes = np.asarray(  # Reverb's ids are uint64; ours int64
                    [it.episode_ids[0] if it.episode_ids else 0 for it in run], np.uint64
                ).view(np.int64)
                prio = np.asarray([it.priority for it in run], np.float64)
                before = items.counter
                rows_2d = np.stack(rows, axis=1)
                items.insert_now(items.layout_id(layout), rows_2d, prio, episodes)
            finally:
                core.store.close_stream(stream)  # the items keep their rows
            slots = np.flatnonzero((items.key >= 0) & (items.seq >= before))
            slots = slots[np.argsort(items.seq[slots])]
            items.times_sampled[slots] = [it.times_sampled for it in run]
        lim, state = items.limiter, saved.rate_limiter
        lim.inserts, lim.samples, lim.deletes = (
            state.insert_count,
            state.sample_count,
            state.delete_count,
        )
        lim.insert_completed, lim.sample_completed = state.insert_count, state.sample_count
        items.num_deleted_episodes = saved.num_deleted_episodes
        items.num_unique_samples = saved.num_unique_samples
