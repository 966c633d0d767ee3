"""Gymnasium spaces to SB3 buffer arrays: dtypes, shapes and frame-stack layout.

SB3's buffers store what ``add`` receives in arrays of the space's dtype,
reshaped to ``[n_envs, *obs_shape]`` (observations) and ``[n_envs, action_dim]``
(actions); float64 actions become float32. These helpers reproduce that so the
recollect buffer stores and returns exactly what SB3's would.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

from recollect.arguments import is_int
from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError
from recollect.specs import ArraySpec
from recollect.storage.frames.frame_store import FrameStack

FLOAT32 = np.dtype(np.float32)

__all__ = [
    "action_dtype",
    "as_actions",
    "as_observations",
    "first_env",
    "obs_spec",
    "resolve_frame_stack",
]


def action_dtype(action_space: spaces.Space) -> np.dtype:
    """The dtype SB3 stores actions in: the space's, except float64 -> float32."""
    dtype = np.dtype(action_space.dtype)
    return np.dtype(np.float32) if dtype == np.float64 else dtype


def as_observations(obs: Any, space: spaces.Space, n_envs: int) -> Any:
    """``obs`` as arrays ``[n_envs, *obs_shape]`` of the space's dtype (a dict for Dict spaces).

    Raises:
        ShapeError-like ``InvalidArgumentError``: the values cannot be reshaped
            to ``[n_envs, *obs_shape]``.
    """
    if isinstance(space, spaces.Dict):
        missing = set(space.spaces) - set(obs)
        if missing:
            raise InvalidArgumentError(
                f"observation dict misses keys {sorted(missing)}; the observation space has "
                f"keys {sorted(space.spaces)}."
            )
        return {key: as_observations(obs[key], sub, n_envs) for key, sub in space.spaces.items()}
    shape = (n_envs, *get_obs_shape(space))
    array = np.asarray(obs, dtype=space.dtype)
    if array.size != math.prod(shape):
        raise InvalidArgumentError(
            f"observations must have shape {shape} (n_envs, *observation_space.shape); got "
            f"shape {array.shape}."
        )
    return array.reshape(shape)


def as_actions(action: Any, space: spaces.Space, n_envs: int) -> np.ndarray:
    """``action`` as ``[n_envs, action_dim]`` in SB3's action dtype (SB3 GH #970, #1392)."""
    shape = (n_envs, get_action_dim(space))
    array = np.asarray(action)
    if array.size != shape[0] * shape[1]:
        raise InvalidArgumentError(
            f"actions must have shape {shape} (n_envs, action_dim); got shape {array.shape}."
        )
    return array.reshape(shape).astype(action_dtype(space), copy=False)


def obs_spec(space: spaces.Space) -> Any:
    """One env's observation spec as SB3 stores it (shape ``get_obs_shape``, space dtype)."""
    if isinstance(space, spaces.Dict):
        return {key: obs_spec(sub) for key, sub in space.spaces.items()}
    shape = get_obs_shape(space)
    assert isinstance(shape, tuple)  # a dict only for Dict spaces
    return ArraySpec(shape, np.dtype(space.dtype))


def first_env(tree: Any) -> Any:
    """Drops the env dim of every array of ``tree`` (a dict or an array) at index 0."""
    if isinstance(tree, dict):
        return {key: value[0] for key, value in tree.items()}
    return tree[0]


def resolve_frame_stack(frame_stack: Any, space: spaces.Space) -> FrameStack | None:
    """The :class:`~recollect.FrameStack` for ``frame_stack=`` (None, an int or a FrameStack).

    An int ``k`` describes SB3's ``VecFrameStack(n_stack=k)`` of single-channel
    frames: zero padding at episode starts, frames stacked along the last axis
    (``[84, 84, k]``) or, after ``VecTransposeImage``, the first (``[k, 84, 84]``).

    Raises:
        InvalidArgumentError: a Dict space, a non-Box space, or no first/last
            axis of size ``k`` (multi-channel frames need one FrameStack per
            channel, which recollect does not do; pass no ``frame_stack``).
    """
    if frame_stack is None:
        return None
    if isinstance(space, spaces.Dict) or not isinstance(space, spaces.Box):
        raise InvalidArgumentError(
            f"frame_stack needs a Box observation space of stacked frames; got {space}. "
            "Drop frame_stack for Dict or discrete observations."
        )
    if isinstance(frame_stack, FrameStack):
        return frame_stack
    if not is_int(frame_stack):
        raise InvalidArgumentTypeError(
            f"`frame_stack` must be None, an int (VecFrameStack's n_stack) or a "
            f"recollect.FrameStack; got {frame_stack!r}."
        )
    k, shape = int(frame_stack), space.shape
    first, last = len(shape) > 0 and shape[0] == k, len(shape) > 0 and shape[-1] == k
    if first and last:  # SB3's rule: the smallest axis is the channel axis
        first = int(np.argmin(shape)) == 0
        last = not first
    if not (first or last):
        raise InvalidArgumentError(
            f"frame_stack={k} needs an observation whose first or last axis holds the {k} "
            f"stacked single-channel frames; got observation shape {shape}. Pass "
            "recollect.FrameStack(stack_size, axis=...) for another layout, or no frame_stack "
            "for multi-channel frames."
        )
    return FrameStack(stack_size=k, axis=0 if first else -1, padding="zero")


class AddConverter:
    """SB3's ``add`` arguments to arrays ``[n_envs, ...]`` of the stored dtypes.

    What :func:`as_observations` and :func:`as_actions` do, with the shapes,
    dtypes and error messages worked out once per buffer instead of per call.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, n: int) -> None:
        self.space, self.n = observation_space, n
        self.dict_obs = isinstance(observation_space, spaces.Dict)
        if not self.dict_obs:
            self.obs_shape = (n, *get_obs_shape(observation_space))
            self.obs_dtype = np.dtype(observation_space.dtype)
            self.obs_size = math.prod(self.obs_shape)
        self.action_space = action_space
        self.action_shape = (n, get_action_dim(action_space))
        self.action_size = self.action_shape[0] * self.action_shape[1]
        self.action_dtype = action_dtype(action_space)
        self.scalar_shape = (n,)

    def observations(self, obs: Any) -> Any:
        """As :func:`as_observations` (same errors)."""
        if type(obs) is np.ndarray and obs.dtype is self.obs_dtype and obs.shape == self.obs_shape:
            return obs  # the common case: nothing to convert
        if self.dict_obs:
            return as_observations(obs, self.space, self.n)
        array = np.asarray(obs, dtype=self.obs_dtype)
        if array.shape == self.obs_shape:
            return array
        if array.size != self.obs_size:
            raise InvalidArgumentError(
                f"observations must have shape {self.obs_shape} (n_envs, "
                f"*observation_space.shape); got shape {array.shape}."
            )
        return array.reshape(self.obs_shape)

    def actions(self, action: Any) -> np.ndarray:
        """As :func:`as_actions` (same errors)."""
        if type(action) is np.ndarray and action.dtype is self.action_dtype:
            if action.shape == self.action_shape:
                return action  # the common case: nothing to convert
            if action.size == self.action_size:  # e.g. CleanRL's Discrete actions [n_envs]
                return action.reshape(self.action_shape)
        array = np.asarray(action)
        if array.shape != self.action_shape:
            if array.size != self.action_shape[0] * self.action_shape[1]:
                raise InvalidArgumentError(
                    f"actions must have shape {self.action_shape} (n_envs, action_dim); got "
                    f"shape {array.shape}."
                )
            array = array.reshape(self.action_shape)
        return array if array.dtype == self.action_dtype else array.astype(self.action_dtype)

    def scalars(self, value: Any, dtype: np.dtype) -> np.ndarray:
        """``value`` as ``[n_envs]`` of ``dtype`` (numpy's reshape error if the size differs)."""
        if type(value) is np.ndarray and value.dtype is dtype and value.shape == self.scalar_shape:
            return value  # the common case: nothing to convert
        array = np.asarray(value, dtype)
        return array if array.shape == self.scalar_shape else array.reshape(self.scalar_shape)

    def float_rewards(self, value: Any) -> np.ndarray:
        """``value`` as ``[n_envs]`` floats: a float array of that shape as it is (a write
        into float32 storage casts it, as SB3's ``rewards[pos] = np.array(reward)``),
        anything else as :meth:`scalars` of float32 (same errors)."""
        if type(value) is np.ndarray and value.shape == self.scalar_shape:
            if value.dtype.kind == "f":
                return value
        return self.scalars(value, FLOAT32)

    def flags(self, value: Any) -> np.ndarray:
        """``value`` as ``[n_envs]`` of bool, ints or floats (what a float32 array takes
        without error or loss of a 0/1 flag); anything else converted to float32."""
        if (
            type(value) is np.ndarray
            and value.shape == self.scalar_shape
            and value.dtype.kind in "biuf"
        ):
            return value  # the usual bool array of a vector env
        return self.scalars(value, FLOAT32)


def timeouts_of(infos: Any, n_envs: int) -> np.ndarray | None:
    """bool ``[n_envs]`` ``TimeLimit.truncated`` of ``infos``, or None when no env timed out.

    ``infos`` in any form SB3 or gymnasium produces: a list of ``n_envs`` dicts
    (SB3's VecEnv), a gymnasium 1.x vector env's dict of arrays (a value array
    ``"TimeLimit.truncated"`` and its mask ``"_TimeLimit.truncated"``), or an
    empty ``{}`` / ``[]`` (no timeouts).

    Raises:
        InvalidArgumentError: a list of another length than ``n_envs``, or
            something that is neither a list/tuple nor a dict.
    """
    if isinstance(infos, dict):
        if "TimeLimit.truncated" not in infos:
            return None
        value = np.asarray(infos["TimeLimit.truncated"]).astype(bool).reshape(-1)
        mask = np.asarray(infos.get("_TimeLimit.truncated", True)).astype(bool).reshape(-1)
        if value.size not in (1, n_envs) or mask.size not in (1, n_envs):
            raise InvalidArgumentError(
                f"infos['TimeLimit.truncated'] must hold one value per env (n_envs={n_envs}); "
                f"got shape {np.shape(infos['TimeLimit.truncated'])}."
            )
        return np.broadcast_to(value & mask, (n_envs,))
    if isinstance(infos, list | tuple):
        if not infos:
            return None
        if len(infos) != n_envs:
            raise InvalidArgumentError(
                f"`infos` must hold n_envs={n_envs} dicts (or be gymnasium's dict of arrays, "
                f"or empty); got {len(infos)}."
            )
        out = [bool(info.get("TimeLimit.truncated", False)) for info in infos]
        return np.array(out) if any(out) else None
    raise InvalidArgumentError(
        f"`infos` must be a list of n_envs={n_envs} dicts, a gymnasium vector env's dict of "
        f"arrays, or empty; got {type(infos).__name__}."
    )
