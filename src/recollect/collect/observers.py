"""Observers: callables that collection loops and drivers feed steps into a buffer.

An observer accepts what an environment driver has at hand: one step or a
batch of steps, as numpy arrays or framework tensors (anything with
``__array__``; torch and TensorFlow tensors are converted without importing
either framework), in the spec's nest or any nest with the same leaf paths
(e.g. a TF-Agents ``Trajectory`` namedtuple, a dict, or a rebuilt namedtuple
of another class).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from recollect.errors import ShapeError, StateError
from recollect.specs import leaf_paths
from recollect.validation import as_numpy, check_structure, convert_step

__all__ = ["Observer"]


def to_numpy(value: Any, path: str = "<root>", what: str = "observer step") -> Any:
    """Converts a torch/TF tensor or anything with ``__array__`` to numpy (no copy if possible).

    Raises:
        DTypeError: a tensor dtype numpy lacks (``torch.bfloat16``); the message
            names ``path`` and says to convert it.
    """
    if isinstance(value, np.ndarray):
        return value
    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "detach"):
        value = value.detach().cpu()
    elif module.startswith("tensorflow") and hasattr(value, "numpy"):
        value = value.numpy()
    return as_numpy(value, path, what)


class Observer:
    """Adds steps to a :class:`~recollect.ReplayBuffer`; call it with what a driver collected.

    Accepted leading dims of every leaf (the same for all leaves):

    - none: one step (only when the buffer has ``num_envs == 1``);
    - ``[num_envs]``: one step of every env (``add_batch``);
    - ``[num_envs, T]``: ``T`` consecutive steps of every env, added in time order.

    Attributes:
        num_steps: steps added through this observer (over all envs).

    Raises (on call):
        SpecError: the nest does not have the spec's leaf paths.
        ShapeError: leaves disagree on their leading dims, or one step is
            given to a buffer with several env rows.
        DTypeError, CastError: a value cannot be stored safely (nothing is written),
            e.g. a ``torch.bfloat16`` tensor (convert it with ``.float()``).
        StateError: the observer was closed (its manager was closed).

    Example:
        >>> observer = Observer(buffer)
        >>> observer(trajectory)   # leaves [num_envs, ...]
    """

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer
        self._flat = getattr(buffer, "writer", buffer).flat_spec  # a ReplayBuffer's writer
        self.num_steps = 0
        self._closed = False

    def close(self) -> None:
        """Refuses further steps (idempotent)."""
        self._closed = True

    def _flatten(self, steps: Any) -> list[Any]:
        flat = self._flat
        try:
            return flat.treedef.flatten_up_to(steps)
        except (ValueError, TypeError):
            pass
        try:
            leaves = optree.tree_leaves(steps, none_is_leaf=False)
            by_path = dict(zip(leaf_paths(steps), leaves, strict=True))
        except Exception:
            by_path = {}
        if set(by_path) == set(flat.paths):
            return [by_path[p] for p in flat.paths]
        return check_structure(flat, steps, "observer step")  # raises SpecError

    def _extra_dims(self, arrays: list[np.ndarray]) -> int:
        extra = [a.ndim - len(s) for a, s in zip(arrays, self._flat.shapes, strict=True)]
        if len(set(extra)) != 1 or extra[0] not in (0, 1, 2):
            got = {p: a.shape for p, a in zip(self._flat.paths, arrays, strict=True)}
            want = dict(zip(self._flat.paths, self._flat.shapes, strict=True))
            raise ShapeError(
                f"observer step: leaves must all have no leading dim, [num_envs] or "
                f"[num_envs, T] in front of the spec's shape; got shapes {got} for spec "
                f"shapes {want}."
            )
        return extra[0]

    def __call__(self, steps: Any) -> None:
        if self._closed:
            raise StateError("this observer's manager was closed; create or load a new buffer.")
        leaves = self._flatten(steps)
        arrays = [to_numpy(v, p) for v, p in zip(leaves, self._flat.paths, strict=True)]
        extra = self._extra_dims(arrays)
        buffer, num_envs = self._buffer, self._buffer.num_envs
        if extra == 0:
            if num_envs != 1:
                raise ShapeError(
                    f"observer step has no env dim but the buffer has num_envs={num_envs}; "
                    f"give leaves a leading dim of {num_envs}."
                )
            arrays = [a[None] for a in arrays]
        if extra == 2:
            length = arrays[0].shape[1]
            if any(a.shape[1] != length for a in arrays):
                raise ShapeError(
                    f"observer step: leaves disagree on the time dim; got "
                    f"{[a.shape[:2] for a in arrays]}."
                )
            steps_k = [[a[:, k] for a in arrays] for k in range(length)]
            converted = [
                convert_step(self._flat, self._flat.unflatten(s), (num_envs,), "observer step")
                for s in steps_k
            ]
            for leaves in converted:  # every step validated before the first is written
                buffer.add_batch(self._flat.unflatten(leaves))
                self.num_steps += num_envs
            return
        buffer.add_batch(self._flat.unflatten(arrays))
        self.num_steps += num_envs
