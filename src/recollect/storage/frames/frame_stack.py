"""``FrameStack``: marks a leaf as stacked frames (gymnasium ``FrameStackObservation``).

The options of one frame-stacked leaf (stack size, axis, padding, layout) and
their validation against the spec; :mod:`recollect.storage.frames.frame_store` stores them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from recollect.arguments import check_int
from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import ArraySpec, FlatSpec

__all__ = ["FrameStack", "resolve_frame_stacks"]


@dataclasses.dataclass(frozen=True, eq=False)
class FrameStack:
    """Marks an observation leaf as ``stack_size`` stacked frames (store each frame once).

    Args:
        stack_size: frames per stacked observation (the leaf's size along ``axis``).
        axis: the stack axis within the leaf's per-step shape; ``-1`` (default)
            for ``[84, 84, 4]``, ``0`` for gymnasium's ``[4, 84, 84]``.
        padding: how the stack of an episode's first steps is filled, as
            gymnasium's ``FrameStackObservation(padding_type=...)``: ``"reset"``
            (repeat the episode's first frame, gymnasium's default), ``"zero"``,
            or one frame (array of the frame shape) used as padding.
        contiguous: when False (default) a sampled stack with ``axis != 0`` is
            a zero-copy strided view (``np.moveaxis``) over a frame-major gather
            ``[..., stack_size, *frame_shape]``: same shape and values, gathered
            at row-copy speed, but not C-contiguous. True returns C-contiguous
            stacks (rebuilt with word shifts for ``[84, 84, 4]``-like leaves,
            about 3x slower); use it when a consumer needs C order without a copy.

    Raises:
        InvalidArgumentError: ``stack_size`` not in ``[1, 256]``, or ``padding``
            neither ``"reset"``, ``"zero"`` nor an array.

    Example:
        >>> stacks = {"observation": FrameStack(stack_size=4, axis=-1, padding="reset")}
        >>> buf = ReplayBuffer(spec, 100_000, num_envs=8, frame_stacks=stacks)  # doctest: +SKIP
    """

    stack_size: int
    axis: int = -1
    padding: Any = "reset"
    contiguous: bool = False

    def __post_init__(self) -> None:
        k = self.stack_size
        check_int("stack_size", k, minimum=1, maximum=256, owner="FrameStack")
        if isinstance(self.padding, str) and self.padding not in ("reset", "zero"):
            raise InvalidArgumentError(
                f"FrameStack `padding` must be 'reset', 'zero' or one frame (an array); got "
                f"padding={self.padding!r}."
            )

    @property
    def custom_padding(self) -> bool:
        """Whether ``padding`` is a user-given frame."""
        return not isinstance(self.padding, str)

    def config(self) -> dict[str, Any]:
        """JSON-able description (a custom padding frame as a nested list)."""
        pad = self.padding if isinstance(self.padding, str) else np.asarray(self.padding).tolist()
        return {
            "stack_size": int(self.stack_size),
            "axis": int(self.axis),
            "padding": pad,
            "contiguous": bool(self.contiguous),
        }

    def frame_spec(self, path: str, leaf: ArraySpec) -> tuple[int, tuple[int, ...]]:
        """Validates this stack against ``leaf``; returns (normalized axis, frame shape).

        Raises:
            SpecError: the axis is out of range or the leaf's size along it is
                not ``stack_size``.
        """
        ndim = len(leaf.shape)
        if not -ndim <= self.axis < ndim:
            raise SpecError(
                f"frame_stacks['{path}']: axis={self.axis} is out of range for leaf shape "
                f"{leaf.shape}. Use the axis along which the frames are stacked."
            )
        axis = self.axis % ndim
        if leaf.shape[axis] != self.stack_size:
            raise SpecError(
                f"frame_stacks['{path}']: leaf shape {leaf.shape} has {leaf.shape[axis]} "
                f"along axis {self.axis}, expected stack_size={self.stack_size}. Fix the axis "
                "or the stack size."
            )
        return axis, leaf.shape[:axis] + leaf.shape[axis + 1 :]

    def padding_frame(self, path: str, frame_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The padding frame (zeros for "reset"/"zero"); raises SpecError if it does not fit."""
        if not self.custom_padding:
            return np.zeros(frame_shape, dtype)
        pad = np.asarray(self.padding)
        if pad.shape != frame_shape or not np.can_cast(pad.dtype, dtype, casting="same_kind"):
            raise SpecError(
                f"frame_stacks['{path}']: custom padding must be one frame of shape {frame_shape} "
                f"castable to {dtype}; got shape {pad.shape}, dtype {pad.dtype}."
            )
        cast = pad.astype(dtype)
        if not np.array_equal(cast, pad):
            raise SpecError(
                f"frame_stacks['{path}']: custom padding loses values when cast to {dtype}."
            )
        return cast


def resolve_frame_stacks(flat_spec: FlatSpec, frame_stacks: Any) -> dict[int, FrameStack]:
    """Maps ``{leaf path: FrameStack}`` to ``{leaf index: FrameStack}``, validating each.

    Raises:
        InvalidArgumentError: ``frame_stacks`` is not a mapping of FrameStack.
        SpecError: a path names no leaf, or a stack does not fit its leaf.
    """
    if not frame_stacks:
        return {}
    if not isinstance(frame_stacks, dict):
        raise InvalidArgumentError(
            "`frame_stacks` must be a dict {leaf path: FrameStack}; got "
            f"{type(frame_stacks).__name__}. Example: "
            "frame_stacks={'observation': FrameStack(stack_size=4)}."
        )
    resolved = {}
    for path, stack in frame_stacks.items():
        if not isinstance(stack, FrameStack):
            raise InvalidArgumentError(
                f"frame_stacks['{path}'] must be a recollect.FrameStack; got {stack!r}."
            )
        i = flat_spec.index(path)
        _, frame_shape = stack.frame_spec(path, flat_spec.leaves[i])
        stack.padding_frame(path, frame_shape, flat_spec.dtypes[i])
        resolved[i] = stack
    return resolved
