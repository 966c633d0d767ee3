"""Shared by the dataset tests: small gymnasium envs, collection, slow reference episode split."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import optree
from gymnasium import spaces

import recollect as rc
from recollect.cli.populate import rlds_step_spec


class ImageDictEnv(gym.Env):
    """Dict observations (a uint8 32x32x3 image, a float32 state), Box actions.

    Episodes end after 3-9 steps, by termination or truncation at random.
    """

    observation_space = spaces.Dict(
        {
            "image": spaces.Box(0, 255, (32, 32, 3), np.uint8),
            "state": spaces.Box(-np.inf, np.inf, (3,), np.float32),
        }
    )
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self):
        return {
            "image": self.np_random.integers(0, 256, (32, 32, 3), dtype=np.uint8),
            "state": self.np_random.standard_normal(3).astype(np.float32),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._end = 0, int(self.np_random.integers(3, 10))
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        done = self._t >= self._end
        terminated = done and bool(self.np_random.random() < 0.5)
        return self._obs(), float(self.np_random.standard_normal()), terminated, done, {}


class _Row:
    """One env writing RLDS steps (nested observations allowed); random actions."""

    def __init__(self, env, seed: int) -> None:
        self.env = env
        env.action_space.seed(seed)
        self.obs, _ = env.reset(seed=seed)
        self.first, self.final, self.terminal = True, False, False

    def step(self) -> dict:
        zero = optree.tree_map(np.zeros_like, self.env.action_space.sample())
        action = zero if self.final else self.env.action_space.sample()
        step = {"observation": self.obs, "action": np.asarray(action), "is_first": self.first}
        step |= {"is_last": self.final, "is_terminal": self.final and self.terminal}
        if self.final:
            step |= {"reward": np.float32(0), "discount": np.float32(not self.terminal)}
            self.obs, _ = self.env.reset()
            self.first, self.final = True, False
            return step
        self.obs, reward, terminated, truncated, _ = self.env.step(action)
        step |= {"reward": np.float32(reward), "discount": np.float32(not terminated)}
        self.first, self.final, self.terminal = False, terminated or truncated, terminated
        return step


def collect(envs, steps: int, capacity: int, seed: int = 0) -> rc.ReplayBuffer:
    """An RLDS buffer filled by a random policy, ``steps`` add_batch calls."""
    rows = [_Row(env, seed + i) for i, env in enumerate(envs)]
    spec = rlds_step_spec(envs[0].observation_space, envs[0].action_space)
    buf = rc.ReplayBuffer(spec, capacity, len(envs), rng=seed)
    for _ in range(steps):
        buf.add_batch(optree.tree_map(lambda *xs: np.stack(xs), *[r.step() for r in rows]))
    return buf


def reference_episodes(buf: rc.ReplayBuffer) -> tuple[list, int]:
    """Slow twin of ``_stored_episodes``: a step-by-step scan of every row."""
    data = buf.gather_all()
    episodes, skipped = [], 0
    for row in range(buf.num_envs):
        flags_first, flags_last = data["is_first"][row], data["is_last"][row]
        start, complete = 0, bool(flags_first[0]) if len(flags_first) else False
        for t in range(len(flags_last)):
            if t > start and flags_first[t]:  # an episode restarted without is_last
                start, complete = t, True
            if flags_last[t]:
                if complete:
                    episodes.append(
                        optree.tree_map(lambda x, r=row, s=start, e=t: x[r, s : e + 1], data)
                    )
                else:
                    skipped += 1
                start, complete = t + 1, True
        if start < len(flags_last):
            skipped += 1
    return episodes, skipped


def assert_same_episode(a, b) -> None:
    """Leaf by leaf: same paths, dtypes and values."""
    leaves_a, tree_a = optree.tree_flatten(a)
    leaves_b, tree_b = optree.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
