"""Import speed from Minari: W2 steps (WORKLOADS.md) loaded into a ReplayBuffer.

Run ``python benchmarks/bench_datasets.py`` (about a minute) or with ``--quick``.

A Minari dataset of 1M W2 steps (observation float32[17], action float32[6],
float32 reward; episodes of ``--episode-length`` actions, default 1000 as in
D4RL's MuJoCo sets) is written once to a temporary ``MINARI_DATASETS_PATH``.
Rows, timed interleaved in this one process, median over repeats:

* ``minari iterate``: ``dataset.iterate_episodes()``, touching every array
  (what Minari itself needs to read the episodes) -- the reference row.
* ``recollect from_minari``: ``rc.datasets.from_minari(dataset)``: the same
  read, the RLDS mapping, and the buffer writes.
* ``add_batch loop``: only the buffer writes of ``from_minari`` (one
  ``add_batch`` per step, the public write API) on arrays already in memory.
* ``numpy bulk copy``: the same bytes copied into preallocated arrays with one
  slice assignment per episode and leaf: what a bulk ``extend`` could cost.

The issue's target: ``from_minari`` <= 2x ``minari iterate``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_seconds

OBS, ACT = 17, 6


def make_dataset(steps: int, length: int) -> object:
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(steps // length):
        terminated = bool(rng.random() < 0.5)
        episodes.append(
            EpisodeBuffer(
                observations=rng.standard_normal((length + 1, OBS)).astype(np.float32),
                actions=rng.uniform(-1, 1, (length, ACT)).astype(np.float32),
                rewards=rng.standard_normal(length).astype(np.float32),
                terminations=np.r_[np.zeros(length - 1, bool), terminated],
                truncations=np.r_[np.zeros(length - 1, bool), not terminated],
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari's advice on author, permalink, ...
        return minari.create_dataset_from_buffers(
            "w2/random-v0",
            episodes,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32),
            action_space=gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32),
        )


def minari_iterate(dataset: object) -> Callable[[], object]:
    def run() -> int:
        n = 0
        for ep in dataset.iterate_episodes():
            n += ep.observations.shape[0] + ep.actions.shape[0] + ep.rewards.shape[0]
        return n

    return run


def recollect_import(dataset: object) -> Callable[[], object]:
    import recollect.datasets as rd

    return lambda: rd.from_minari(dataset, rng=0)


def add_batch_loop(dataset: object) -> Callable[[], object]:
    import recollect as rc
    import recollect.datasets as rd

    template = rd.from_minari(dataset, rng=0)
    data = template.gather_all()
    steps = template.num_frames()
    leaves = {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in data.items()}  # [T, 1, ...]

    def run() -> object:
        buf = rc.ReplayBuffer(template.data_spec, steps, 1, rng=0)
        for t in range(steps):
            buf.add_batch({k: v[t] for k, v in leaves.items()})
        return buf

    return run


def numpy_bulk(dataset: object) -> Callable[[], object]:
    episodes = [(ep.observations, ep.actions, ep.rewards) for ep in dataset.iterate_episodes()]
    total = sum(len(r) + 1 for _, _, r in episodes)
    out = [np.empty((total, OBS), np.float32), np.empty((total, ACT), np.float32)]
    out.append(np.empty(total, np.float32))

    def run() -> object:
        pos = 0
        for obs, act, rew in episodes:
            n = len(rew)
            out[0][pos : pos + n + 1] = obs
            out[1][pos : pos + n] = act
            out[2][pos : pos + n] = rew
            pos += n + 1
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k steps, 3 repeats")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--episode-length", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    steps = args.steps or (200_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = tmp
        t0 = time.perf_counter()
        dataset = make_dataset(steps, args.episode_length)
        took = time.perf_counter() - t0
        episodes = steps // args.episode_length
        print(f"wrote {steps:,} W2 steps ({episodes} episodes) as Minari hdf5 in {took:.1f}s")
        rows = {
            "minari iterate": minari_iterate(dataset),
            "recollect from_minari": recollect_import(dataset),
            "add_batch loop (writes only)": add_batch_loop(dataset),
            "numpy bulk copy (writes only)": numpy_bulk(dataset),
        }
        seconds = median_seconds(rows, repeats)
    ref = seconds["minari iterate"]
    print(f"\n{'row':32} {'seconds':>9} {'steps/s':>12} {'x minari iterate':>17}")
    for name, s in seconds.items():
        print(f"{name:32} {s:9.3f} {steps / s:12,.0f} {s / ref:17.2f}")
    ratio = seconds["recollect from_minari"] / ref
    print(f"\nfrom_minari / minari iterate = {ratio:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
