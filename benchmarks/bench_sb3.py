"""recollect.sb3 vs SB3's own ReplayBuffer on Atari-shaped frame stacks (W1 shapes, 8 envs).

The stream is what SB3's DQN gives its buffer behind ``VecFrameStack(4)`` and
``VecTransposeImage``: uint8 observations ``[4, 84, 84]``, zero-padded stacks at
episode starts, ``terminal_observation`` put into ``next_obs`` at episode ends
(episodes of ``--episode-steps`` steps on average). Every buffer is filled to
capacity with the same stream, then:

- bytes per stored transition: allocated bytes / capacity (and the RSS growth
  while filling, which counts only touched pages);
- ``sample(32)`` and ``add`` (8 envs) per second, timed interleaved in this
  run; ratios are to SB3's default buffer.

Then CleanRL's pattern (``--only cleanrl``): CartPole-shaped float32 ``[4]``
observations, ``Discrete(2)`` actions, a 10,000-transition buffer with
``handle_timeout_termination=False``, ``add`` every step and ``sample(B)``
every step, for 1 and 8 envs and ``B`` = 128 and 256. SB3's rows are the limit
rows: the table gives each recollect row's time per call as a multiple of
SB3's time for the same call in the same run (targets: add <= 1.5x,
sample <= 1.0x, add+sample <= 1.1x).

    python benchmarks/bench_sb3.py [--quick] [--capacity 20000] [--only atari|cleanrl]
"""

from __future__ import annotations

import argparse
import gc
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from _common import Row, cycle, measure, print_table, rss_bytes

N_ENVS, STACK, SIDE = 8, 4, 84


class AtariLikeStream:
    """SB3 ``add`` arguments of 8 envs behind VecFrameStack(4) + VecTransposeImage.

    Frames come from a pool of random 84x84 frames; an env's episode ends with
    probability ``1 / episode_steps`` per step.
    """

    def __init__(self, episode_steps: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, 256, (256, SIDE, SIDE), dtype=np.uint8)
        self.p_end = 1.0 / episode_steps
        self.stacks = np.zeros((N_ENVS, STACK, SIDE, SIDE), np.uint8)
        self.stacks[:, -1] = self.frames(N_ENVS)

    def frames(self, n: int) -> np.ndarray:
        return self.pool[self.rng.integers(0, len(self.pool), n)]

    def step(self) -> tuple:
        obs = self.stacks.copy()
        self.stacks[:, :-1] = self.stacks[:, 1:]
        self.stacks[:, -1] = self.frames(N_ENVS)
        next_obs = self.stacks.copy()  # terminal observations of the envs that end
        done = self.rng.random(N_ENVS) < self.p_end
        ends = np.flatnonzero(done)
        self.stacks[ends] = 0
        self.stacks[ends, -1] = self.frames(len(ends))
        action = self.rng.integers(0, 18, N_ENVS)
        reward = self.rng.random(N_ENVS).astype(np.float32)
        return obs, next_obs, action, reward, done, [{} for _ in range(N_ENVS)]

    def restart(self) -> None:
        """Every env starts an episode (a valid first step for any buffer)."""
        self.stacks[:] = 0
        self.stacks[:, -1] = self.frames(N_ENVS)


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return gym.spaces.Box(0, 255, (STACK, SIDE, SIDE), np.uint8), gym.spaces.Discrete(18)


def build(kind: str, capacity: int) -> Any:
    from stable_baselines3.common.buffers import ReplayBuffer

    import recollect.sb3

    obs_space, act_space = spaces()
    args = (capacity, obs_space, act_space, "cpu", N_ENVS)
    if kind == "sb3":
        return ReplayBuffer(*args)
    if kind == "sb3-optimize":  # SB3 needs handle_timeout_termination=False with it
        return ReplayBuffer(*args, optimize_memory_usage=True, handle_timeout_termination=False)
    if kind == "recollect":
        return recollect.sb3.ReplayBuffer(*args, frame_stack=STACK, rng=0)
    if kind == "recollect-per":
        return recollect.sb3.PrioritizedReplayBuffer(*args, frame_stack=STACK, rng=0)
    raise ValueError(kind)


def allocated_bytes(buf: Any) -> int:
    if hasattr(buf, "transitions"):
        return buf.nbytes
    arrays = [buf.observations, buf.actions, buf.rewards, buf.dones, buf.timeouts]
    if not buf.optimize_memory_usage:
        arrays.append(buf.next_observations)
    return sum(a.nbytes for a in arrays)


def fill(kinds: list[str], capacity: int, episode_steps: int) -> dict[str, tuple[Any, int, int]]:
    """Builds and fills each buffer with the same stream; returns (buffer, bytes, RSS growth)."""
    out = {}
    for kind in kinds:
        stream = AtariLikeStream(episode_steps)
        gc.collect()
        before = rss_bytes()
        buf = build(kind, capacity)
        for _ in range(capacity // N_ENVS):
            buf.add(*stream.step())
        out[kind] = (buf, allocated_bytes(buf), rss_bytes() - before)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--episode-steps", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", choices=("atari", "cleanrl"), default=None)
    args = parser.parse_args()
    repeats = args.repeats or (5 if args.quick else 9)
    repeat_s = 0.02 if args.quick else 0.06
    th.set_num_threads(1)
    if args.only != "atari":
        run_cleanrl(repeats, repeat_s)
    if args.only != "cleanrl":
        run_atari(args, repeats, repeat_s)


def cleanrl_stream(n_envs: int, steps: int, seed: int) -> list[tuple]:
    """CleanRL's ``rb.add(obs, real_next_obs, actions, rewards, terminations, infos)`` calls."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((steps + 1, n_envs, 4)).astype(np.float32)
    out = []
    for t in range(steps):
        action = rng.integers(0, 2, n_envs)
        reward = np.ones(n_envs, np.float32)
        done = rng.random(n_envs) < 0.02
        out.append((obs[t], obs[t + 1].copy(), action, reward, done, {}))
    return out


def run_cleanrl(repeats: int, repeat_s: float) -> None:
    """Per-call times of CleanRL's pattern, recollect.sb3 vs SB3 (SB3 = limit rows)."""
    from stable_baselines3.common.buffers import ReplayBuffer

    import recollect.sb3

    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = gym.spaces.Discrete(2)
    print("\n## CleanRL pattern: us per call, and recollect's time as a multiple of SB3's")
    head = (
        f"{'n_envs':>6} {'batch':>5} {'call':<11} {'sb3 us':>8} {'recollect us':>13} {'x sb3':>7}"
    )
    print(f"{head}\n{'-' * len(head)}")
    for n_envs in (1, 8):
        for batch in (128, 256):
            bufs = {}
            for kind, cls in (("sb3", ReplayBuffer), ("recollect", recollect.sb3.ReplayBuffer)):
                kw = {"rng": 0} if kind == "recollect" else {}
                buf = cls(
                    10_000,
                    obs_space,
                    act_space,
                    "cpu",
                    n_envs=n_envs,
                    handle_timeout_termination=False,
                    **kw,
                )
                for step in cleanrl_stream(n_envs, 10_000 // n_envs + 10, 0):
                    buf.add(*step)
                bufs[kind] = buf
            rows = []
            for kind, buf in bufs.items():
                nxt = cycle(cleanrl_stream(n_envs, 256, 1))

                def both(b: Any = buf, n: Any = nxt, k: int = batch) -> None:
                    b.add(*n())
                    b.sample(k)

                rows += [
                    Row(f"{kind} add", lambda b=buf, n=nxt: b.add(*n()), n_envs),
                    Row(f"{kind} sample", lambda b=buf, k=batch: b.sample(k), batch),
                    Row(f"{kind} add+sample", both, n_envs),
                ]
            by = {r.name: r.seconds for r in measure(rows, repeats, repeat_s)}
            for call in ("add", "sample", "add+sample"):
                sb3, ours = by[f"sb3 {call}"], by[f"recollect {call}"]
                print(
                    f"{n_envs:>6} {batch:>5} {call:<11} {sb3 * 1e6:>8.1f} {ours * 1e6:>13.1f} "
                    f"{ours / sb3:>7.2f}",
                    flush=True,
                )


def run_atari(args: Any, repeats: int, repeat_s: float) -> None:
    kinds = ["sb3", "sb3-optimize", "recollect", "recollect-per"]
    buffers = fill(kinds, args.capacity, args.episode_steps)

    print(
        f"\n## bytes per stored transition (capacity {args.capacity:,}, 8 envs, uint8 [4, 84, 84])"
    )
    print(f"{'buffer':<16} {'allocated B':>12} {'RSS growth B':>13} {'x sb3':>7}")
    base = buffers["sb3"][1] / args.capacity
    for kind, (_, nbytes, rss) in buffers.items():
        per, per_rss = nbytes / args.capacity, rss / args.capacity
        print(f"{kind:<16} {per:>12,.0f} {per_rss:>13,.0f} {per / base:>7.3f}")

    rows = [
        Row(f"{kind} sample(32)", lambda b=b: b.sample(32), 32)
        for kind, (b, _, _) in buffers.items()
    ]
    store = buffers["sb3"][0]
    rng = np.random.default_rng(1)

    def gather() -> Any:  # limit: the two observation gathers SB3's layout needs
        i, e = rng.integers(0, store.buffer_size, 32), rng.integers(0, N_ENVS, 32)
        return store.observations[i, e], store.next_observations[i, e]

    rows.append(Row("numpy gather obs+next_obs (limit)", gather, 32))
    print_table("sample(32): transitions/s", measure(rows, repeats, repeat_s), ["sb3 sample(32)"])

    streams = {}
    for kind in buffers:
        stream = AtariLikeStream(args.episode_steps, seed=2)
        stream.restart()
        streams[kind] = cycle([stream.step() for _ in range(32)])
    add_rows = [
        Row(f"{kind} add(8 envs)", lambda b=b, s=streams[kind]: b.add(*s()), N_ENVS)
        for kind, (b, _, _) in buffers.items()
    ]
    print_table("add: transitions/s", measure(add_rows, repeats, repeat_s), ["sb3 add(8 envs)"])


if __name__ == "__main__":
    main()
