"""Streams of SB3 ``add`` calls for the recollect.sb3 tests, made the way SB3 makes them.

:func:`vec_env_stream` steps a real SB3 ``VecEnv`` (autoreset, ``TimeLimit``
truncations, ``terminal_observation`` in ``infos``) with random actions and
builds ``(obs, next_obs, action, reward, done, infos)`` exactly as
``OffPolicyAlgorithm._store_transition`` does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ImageEnv(gym.Env):
    """Random single-channel frames ``[size, size, 1]`` uint8, episodes of random length.

    Terminates with probability 1/8 per step; a ``TimeLimit`` adds truncations.
    """

    def __init__(self, size: int = 12) -> None:
        self.observation_space = spaces.Box(0, 255, (size, size, 1), np.uint8)
        self.action_space = spaces.Discrete(3)

    def _frame(self) -> np.ndarray:
        return self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        terminated = bool(self.np_random.random() < 1 / 8)
        return self._frame(), float(action) - 0.5, terminated, False, {}


class DictEnv(gym.Env):
    """Dict observations (float32 vector, uint8 image, Discrete scalar), Box actions."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "vec": spaces.Box(-1, 1, (3,), np.float32),
                "img": spaces.Box(0, 255, (2, 4, 4), np.uint8),
                "disc": spaces.Discrete(5),
            }
        )
        self.action_space = spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self) -> dict[str, Any]:
        return self.observation_space.sample()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        terminated = bool(self.np_random.random() < 0.1)
        return self._obs(), float(action.sum()), terminated, False, {}


def vec_env_stream(venv: Any, steps: int, seed: int = 0) -> Iterator[tuple]:
    """``steps`` SB3 ``add`` argument tuples from ``venv`` with random actions."""
    venv.seed(seed)
    venv.action_space.seed(seed)
    last_obs = venv.reset()
    for _ in range(steps):
        actions = np.array([venv.action_space.sample() for _ in range(venv.num_envs)])
        new_obs, rewards, dones, infos = venv.step(actions)
        next_obs = copy.deepcopy(new_obs)
        for i, done in enumerate(dones):
            if done and infos[i].get("terminal_observation") is not None:
                if isinstance(next_obs, dict):
                    for key in next_obs:
                        next_obs[key][i] = infos[i]["terminal_observation"][key]
                else:
                    next_obs[i] = infos[i]["terminal_observation"]
        yield last_obs, next_obs, actions, rewards, dones, infos
        last_obs = new_obs
