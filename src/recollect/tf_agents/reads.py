"""TF-Agents style ``get_next`` over a :class:`~recollect.ReplayBuffer` (numpy, no TensorFlow).

The drop-ins of :mod:`recollect.tf_agents` read through it; the framework-free
:class:`~recollect.ReplayBuffer` itself only has ``sample``.
"""

from __future__ import annotations

from typing import Any

import optree

from recollect.buffers.sample import BufferInfo

__all__ = ["get_next"]


def _map(fn: Any, tree: Any) -> Any:
    return optree.tree_map(fn, tree, none_is_leaf=False)


def get_next(
    buffer: Any,
    sample_batch_size: int | None = None,
    num_steps: int | None = None,
    time_stacked: bool = True,
) -> tuple[Any, BufferInfo]:
    """TF-Agents style sampling of ``buffer``: ``(items, BufferInfo(ids, probabilities))``.

    ``buffer`` is anything with ``sample(batch_size, num_steps)`` returning a
    :class:`~recollect.Sample`. Leaves are ``[B, T, *shape]`` (``T`` only when
    ``num_steps`` is given). ``sample_batch_size=None`` returns one window without
    a batch dim. ``time_stacked=False`` returns a tuple of ``num_steps`` nests
    instead of a time axis.

    Raises:
        Same as ``buffer.sample``.
    """
    batch = 1 if sample_batch_size is None else sample_batch_size
    s = buffer.sample(batch, num_steps)
    items, ids, probs = s.data, s.ids, s.probabilities
    if sample_batch_size is None:
        items = _map(lambda x: x[0], items)
        ids, probs = ids[0], probs[0]
    if num_steps is not None and not time_stacked:
        axis = 0 if sample_batch_size is None else 1
        items = tuple(_map(lambda x, k=k: x.take(k, axis=axis), items) for k in range(num_steps))
    return items, BufferInfo(ids, probs)
