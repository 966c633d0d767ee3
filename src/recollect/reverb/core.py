"""The server's operations behind one object, for in-process and gRPC callers alike.

:class:`ServerCore` methods take and return only nests (dict with str keys,
list, tuple) of numpy arrays and plain values, so the same calls go through
:class:`LocalChannel` (in-process: a method call, no copy, no socket) or a
``recollect.grpc`` server (which calls ``getattr(core, method)(**args)``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from recollect.arguments import reverb_positive_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import signature as _signature
from recollect.reverb.errors import DeadlineExceededError
from recollect.reverb.items import Layout
from recollect.reverb.store import ColumnStore
from recollect.reverb.table import Table


class ServerCore:
    """The tables of one server and the column store they share."""

    def __init__(self, tables: list[Table], checkpointer: Any = None) -> None:
        self.store = ColumnStore()
        self.tables = {t.name: t for t in tables}
        self.checkpointer = checkpointer
        self._episode_lock = threading.Lock()
        for t in tables:
            if t.items.size or t.items.store.pools:
                raise InvalidArgumentError(
                    f"table '{t.name}' is already hosted by a server; build a new Table "
                    "(e.g. table.replace()) for each server."
                )
            t.items.store = self.store

    def _table(self, name: str) -> Table:
        try:
            return self.tables[name]
        except KeyError:
            raise InvalidArgumentError(
                f"Could not find table '{name}'. The following tables exist: "
                f"{', '.join(sorted(self.tables))}."
            ) from None

    # ------------------------------------------------------------- writes
    def open_stream(self) -> int:
        """A new writer stream id."""
        return self.store.open_stream()

    def close_stream(self, stream: int) -> None:
        """Releases a writer stream's hold on its steps."""
        self.store.close_stream(stream)

    def write(
        self,
        stream: int,
        chunks: list[dict[str, Any]],
        items: list[dict[str, Any]],
        release_columns: np.ndarray | None = None,
        release_steps: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> int:
        """Stores step data, inserts items, releases old steps; returns the items inserted.

        Args:
            stream: from :meth:`open_stream`.
            chunks: ``{"column": int, "first_step": int, "data": [T, *shape] array}`` each.
            items: groups ``{"table", "priorities" [n], "episodes" [n], "columns" [c] (ints),
                "steps" (list of [n, L] int64), "squeeze" (list of bool), "per_step" (bool: the
                signature describes one step, the legacy Writer's items)}``.
            release_columns, release_steps: drop the stream's hold on steps before these.
            timeout: seconds an insert may wait on a rate limiter (None: forever).

        Returns:
            The number of items inserted, in order; fewer than given when the timeout hit.
        """
        for chunk in chunks:
            self.store.append(stream, int(chunk["column"]), int(chunk["first_step"]), chunk["data"])
        done = 0
        for group in items:
            table = self._table(group["table"])
            layout, rows = self._resolve(stream, table, group)
            inserted = table.items.insert(
                layout,
                rows,
                np.asarray(group["priorities"], np.float64),
                np.asarray(group["episodes"], np.int64),
                timeout,
            )
            done += inserted
            if inserted < len(group["priorities"]):
                return done
        if release_columns is not None and len(release_columns):
            self.store.release(
                stream,
                dict(
                    zip(
                        np.asarray(release_columns).tolist(),
                        np.asarray(release_steps).tolist(),
                        strict=True,
                    )
                ),
            )
        return done

    def _resolve(
        self, stream: int, table: Table, group: dict[str, Any]
    ) -> tuple[Layout, np.ndarray]:
        pools, lengths, parts, got = [], [], [], []
        with self.store.lock:
            for column, steps, squeeze in zip(
                group["columns"], group["steps"], group["squeeze"], strict=True
            ):
                steps = np.asarray(steps, np.int64)
                pool_id, rows = self.store.rows(stream, int(column), steps)
                pools.append(pool_id)
                lengths.append(steps.shape[1])
                parts.append(rows.reshape(steps.shape))
                pool = self.store.pools[pool_id]
                shape = pool.shape if squeeze else (steps.shape[1], *pool.shape)
                got.append((pool.dtype, shape))
        if table.columns is not None:
            if group.get("per_step"):
                steps_got = [(d, s[1:]) for d, s in got]
                _signature.check_steps(table.name, table.columns, steps_got)
            else:
                _signature.check_item(table.name, table.columns, got)
        layout = Layout(tuple(pools), tuple(lengths), tuple(bool(s) for s in group["squeeze"]))
        return layout, np.concatenate(parts, axis=1)

    # ------------------------------------------------------------- reads
    def sample(self, table: str, num_samples: int, timeout: float | None = None) -> dict[str, Any]:
        """Samples 1..``num_samples`` items (see :meth:`Items.sample`)."""
        reverb_positive_int("num_samples", num_samples)
        return self._table(table).items.sample(int(num_samples), timeout)

    def mutate_priorities(
        self, table: str, keys: np.ndarray, priorities: np.ndarray, deletes: np.ndarray
    ) -> None:
        """Updates priorities of ``keys`` and deletes ``deletes`` (unknown keys are ignored)."""
        prio = np.asarray(priorities, np.float64)
        bad = ~(np.isfinite(prio) & (prio >= 0))
        if bad.any():
            raise InvalidArgumentError(
                f"priorities must be finite and >= 0; got {prio[bad][:3]}. Clip them first."
            )
        self._table(table).items.mutate(
            np.asarray(keys, np.uint64).astype(np.int64),
            prio,
            np.asarray(deletes, np.uint64).astype(np.int64),
        )

    def reset(self, table: str) -> None:
        """Clears a table and resets its rate limiter."""
        self._table(table).items.reset()

    def server_info(self) -> dict[str, Any]:
        """Per table, its :class:`TableInfo` as a plain nest (signature encoded)."""
        from recollect.reverb.info import encode_info

        return {name: encode_info(t.info) for name, t in self.tables.items()}

    def checkpoint(self) -> str:
        """Writes a checkpoint with the server's checkpointer; returns its path."""
        if self.checkpointer is None:
            raise DeadlineExceededError("this server has no checkpointer.")
        return str(self.checkpointer.save(self))

    def ping(self) -> bool:
        return True


class LocalChannel:
    """The in-process :class:`recollect.grpc.Channel`: calls the core's method directly."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core

    def call(self, method: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        return getattr(self.core, method)(**args)
