"""TF-Agents style reads of a replay buffer: ``get_next`` and ``gather_all``, as a mixin."""

from __future__ import annotations

from typing import Any

import optree

from recollect.buffers.sample import BufferInfo

__all__ = ["TFAgentsReads"]


def _map(fn: Any, tree: Any) -> Any:
    return optree.tree_map(fn, tree, none_is_leaf=False)


class TFAgentsReads:
    """``get_next`` / ``gather_all`` over a class with ``sample`` and ``gather_stored``."""

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> tuple[Any, BufferInfo]:
        """TF-Agents style sampling: returns ``(items, BufferInfo(ids, probabilities))``.

        ``sample_batch_size=None`` returns one window without a batch dim.
        ``time_stacked=False`` returns a tuple of ``num_steps`` nests instead of
        a time axis.

        Raises:
            Same as ``sample``.
        """
        batch = 1 if sample_batch_size is None else sample_batch_size
        s = self.sample(batch, num_steps)  # type: ignore[attr-defined]
        items, ids, probs = s.data, s.ids, s.probabilities
        if sample_batch_size is None:
            items = _map(lambda x: x[0], items)
            ids, probs = ids[0], probs[0]
        if num_steps is not None and not time_stacked:
            axis = 0 if sample_batch_size is None else 1
            items = tuple(
                _map(lambda x, k=k: x.take(k, axis=axis), items) for k in range(num_steps)
            )
        return items, BufferInfo(ids, probs)

    def gather_all(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps (rows
                written with ``add_batch(..., rows=...)``); use ``gather_row``.
        """
        return self.gather_stored()  # type: ignore[attr-defined]
