"""Optional peer libraries (cpprb, stable-baselines3, torchrl) on the benchmark data.

Each factory returns None when its library is not installed. Every peer is
used its documented default way: next observations stored as a second copy
(cpprb without ``next_of``, SB3 with ``optimize_memory_usage=False``, torchrl
with a ``("next", "observation")`` entry in a ``LazyTensorStorage``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

__all__ = ["available", "cpprb_buffer", "sb3_buffer", "torchrl_buffer"]


def available() -> list[str]:
    """Installed peers among cpprb, stable_baselines3, torchrl."""
    names = ["cpprb", "stable_baselines3", "torchrl"]
    return [n for n in names if importlib.util.find_spec(n) is not None]


class Peer:
    """Uniform interface: ``add(step)`` with a leading env dim, ``sample(batch)``, ``fill``."""

    name = "peer"

    def add(self, step: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def fill(self, step: dict[str, np.ndarray]) -> None:
        """Adds a large batch (any leading dim) as fast as the library allows."""
        raise NotImplementedError

    def sample(self, batch_size: int) -> Any:
        raise NotImplementedError


class _Cpprb(Peer):
    name = "cpprb"

    def __init__(self, capacity: int, spec: dict[str, tuple[tuple[int, ...], Any]]) -> None:
        import cpprb

        env_dict = {k: {"shape": s if s else 1, "dtype": d} for k, (s, d) in spec.items()}
        self.rb = cpprb.ReplayBuffer(capacity, env_dict=env_dict)

    def add(self, step: dict[str, np.ndarray]) -> None:
        self.rb.add(**step)

    fill = add

    def sample(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size)


class _Sb3(Peer):
    name = "stable-baselines3"

    def __init__(self, capacity: int, obs: tuple, act: tuple, n_envs: int) -> None:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer

        obs_shape, obs_dtype = obs
        if np.issubdtype(obs_dtype, np.integer):
            obs_space = gym.spaces.Box(0, 255, obs_shape, obs_dtype)
        else:
            obs_space = gym.spaces.Box(-np.inf, np.inf, obs_shape, obs_dtype)
        act_shape, act_dtype = act
        if act_shape == ():
            act_space = gym.spaces.Discrete(18)
        else:
            act_space = gym.spaces.Box(-1.0, 1.0, act_shape, act_dtype)
        self.n_envs = n_envs
        self.infos = [{} for _ in range(n_envs)]
        self.rb = ReplayBuffer(capacity, obs_space, act_space, device="cpu", n_envs=n_envs)

    def add(self, step: dict[str, np.ndarray]) -> None:
        self.rb.add(
            step["obs"], step["next_obs"], step["act"], step["rew"], step["done"], self.infos
        )

    def fill(self, step: dict[str, np.ndarray]) -> None:
        n = len(step["obs"])
        for i in range(0, n, self.n_envs):
            self.add({k: v[i : i + self.n_envs] for k, v in step.items()})

    def sample(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size)


class _TorchRL(Peer):
    name = "torchrl"

    def __init__(self, capacity: int) -> None:
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        self.rb = ReplayBuffer(storage=LazyTensorStorage(capacity))

    def _td(self, step: dict[str, np.ndarray]) -> Any:
        import torch
        from tensordict import TensorDict

        t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in step.items()}
        return TensorDict(
            {
                "observation": t["obs"],
                "action": t["act"],
                "reward": t["rew"],
                "done": t["done"],
                "next": {"observation": t["next_obs"]},
            },
            batch_size=list(np.shape(step["rew"])),
        )

    def add(self, step: dict[str, np.ndarray]) -> None:
        if np.ndim(step["rew"]):
            self.rb.extend(self._td(step))
        else:
            self.rb.add(self._td(step))

    fill = add

    def sample(self, batch_size: int) -> Any:
        return self.rb.sample(batch_size)


def cpprb_buffer(capacity: int, spec: dict[str, tuple]) -> Peer | None:
    """``spec``: name -> (shape, dtype) with names obs, act, rew, next_obs, done."""
    return _Cpprb(capacity, spec) if "cpprb" in available() else None


def sb3_buffer(capacity: int, spec: dict[str, tuple], n_envs: int) -> Peer | None:
    if "stable_baselines3" not in available():
        return None
    return _Sb3(capacity, spec["obs"], spec["act"], n_envs)


def torchrl_buffer(capacity: int) -> Peer | None:
    return _TorchRL(capacity) if "torchrl" in available() else None
