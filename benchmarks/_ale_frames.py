"""Real ALE frames for the memory benchmarks, generated once and cached.

``AtariPreprocessing`` (v5 env, its own frame skip of 4, so ``frame_skip=1``)
+ ``FrameStackObservation(4)`` (``padding_type="reset"``), ``num_envs``
envs, a random policy (seeded). Saved per game: the newest frame of every
step ``frames`` uint8 ``[steps, num_envs, 84, 84]`` and ``is_first``/
``is_last`` bool ``[steps, num_envs]``; :func:`stacks` rebuilds the
observations the env returned (``[num_envs, 4, 84, 84]``) from them.

    python benchmarks/_ale_frames.py --steps 2500   # writes $RECOLLECT_ALE_CACHE or /tmp
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

GAMES = ("Pong", "Breakout", "MsPacman", "SpaceInvaders", "Seaquest")
CACHE = Path(os.environ.get("RECOLLECT_ALE_CACHE", "/tmp/recollect_ale_frames"))


def generate(game: str, steps: int, num_envs: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    envs = []
    for _ in range(num_envs):
        env = AtariPreprocessing(gym.make(f"ALE/{game}-v5"), frame_skip=1)
        envs.append(FrameStackObservation(env, 4))
    frames = np.empty((steps, num_envs, 84, 84), np.uint8)
    first = np.zeros((steps, num_envs), bool)
    last = np.zeros((steps, num_envs), bool)
    obs = [env.reset(seed=seed + e)[0] for e, env in enumerate(envs)]
    first[0] = True
    for e, env in enumerate(envs):
        env.action_space.seed(seed + e)
    for t in range(steps):
        for e, env in enumerate(envs):
            frames[t, e] = obs[e][-1]
            if t > 0 and last[t - 1, e]:
                first[t, e] = True
            o, _, term, trunc, _ = env.step(env.action_space.sample())
            last[t, e] = term or trunc
            obs[e] = env.reset()[0] if last[t, e] else o
    for env in envs:
        env.close()
    return {"frames": frames, "is_first": first, "is_last": last}


def load(game: str, steps: int, num_envs: int = 8) -> dict[str, np.ndarray]:
    """Cached frames of ``game`` (generated on first use)."""
    path = CACHE / f"{game}_{num_envs}x{steps}.npz"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        data = generate(game, steps, num_envs)
        np.savez(path, **data)
        return data
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def stacks(data: dict[str, np.ndarray], k: int = 4) -> np.ndarray:
    """The observations ``[steps, num_envs, k, 84, 84]`` the env returned (reset padding)."""
    frames, first = data["frames"], data["is_first"]
    steps, n = first.shape
    start = np.zeros((steps, n), np.int64)
    idx = np.arange(steps)[:, None].repeat(n, 1)
    start = np.maximum.accumulate(np.where(first, idx, 0), axis=0)
    back = np.arange(k - 1, -1, -1)
    t = np.maximum(idx[..., None] - back, start[..., None])  # [steps, n, k]
    return frames[t, np.arange(n)[None, :, None]]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2500)
    a = p.parse_args()
    for g in GAMES:
        d = load(g, a.steps)
        print(g, d["frames"].shape, int(d["is_first"].sum()), flush=True)
