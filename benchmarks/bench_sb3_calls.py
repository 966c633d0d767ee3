"""recollect.sb3.ReplayBuffer vs SB3's ReplayBuffer in CleanRL's exact call forms, under load.

Each form builds both buffers with the constructor arguments of a CleanRL
script and feeds them the values those scripts pass (one env):

- ``cartpole`` (``dqn.py``, ``c51.py``): ``Box(-inf, inf, (4,), float32)``,
  ``Discrete(2)``, ``handle_timeout_termination=False``; ``add(obs, real_next_obs,
  actions, rewards, terminations, infos)`` with obs float32 ``[1, 4]``, actions
  int64 ``[1]``, rewards float64 ``[1]``, terminations bool ``[1]`` and
  gymnasium's dict ``infos`` (``{}``, or ``episode``/``_episode`` at episode
  ends); ``sample(128)``.
- ``pendulum`` (``sac/td3/ddpg_continuous_action.py``): obs float32 ``[1, 3]``,
  ``Box(-2, 2, (1,), float32)`` actions ``[1, 1]`` float32, ``sample(256)``.
- ``atari`` (``dqn_atari.py``): ``Box(0, 255, (4, 84, 84), uint8)`` from
  ``FrameStackObservation(4)`` (consecutive stacks share 3 of 4 frames),
  ``Discrete(4)``, ``optimize_memory_usage=True``, ``handle_timeout_termination=False``;
  ``sample(32)``.

Both buffers of a form are filled to capacity, then ``add`` and ``sample`` are
timed in one process in paired rounds (each round a short window of SB3's call
and one of recollect's, order alternating; medians, and the median of the
per-round ratios, which cancels load that changes between rounds), in three
load settings this script starts and stops itself: ``idle``; ``1 busy`` (one
CPU-bound process: on a 2-core machine the other core); ``4 busy`` (four
CPU-bound processes: both cores oversubscribed).
The table gives us per call and recollect's time as a multiple of SB3's (the
limit rows: target <= 1.0x). A benchmark, not a test.

    python benchmarks/bench_sb3_calls.py [--quick] [--forms cartpole,pendulum,atari]
        [--loads 0,1,4] [--capacity 10000] [--repeats 61] [--profile]

``--profile`` prints, per form, a cProfile of recollect's ``add`` instead (calls per
``add`` and the functions that take the time; where the time of a 1-env ``add`` goes).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import _warm_up, cycle

Call = tuple[Any, ...]


@dataclass
class Form:
    """One CleanRL script's buffer: constructor arguments, ``add`` calls and batch size."""

    name: str
    obs_space: gym.spaces.Space
    act_space: gym.spaces.Space
    kwargs: dict[str, Any]
    batch: int
    calls: Callable[[int, int], list[Call]]  # (steps, seed) -> add() argument tuples


def _infos(ended: bool, t: int) -> dict[str, Any]:
    """gymnasium 1.x vector-env ``infos``: ``{}``, or the episode statistics at an end."""
    if not ended:
        return {}
    return {
        "episode": {"r": np.array([float(t)]), "l": np.array([t]), "t": np.array([0.1])},
        "_episode": np.array([True]),
    }


def vector_calls(obs_dim: int, action: Callable[[np.random.Generator], np.ndarray]) -> Any:
    def calls(steps: int, seed: int) -> list[Call]:
        rng = np.random.default_rng(seed)
        obs = rng.standard_normal((steps + 1, 1, obs_dim)).astype(np.float32)
        out = []
        for t in range(steps):
            done = rng.random(1) < 0.01
            out.append(
                (
                    obs[t],
                    obs[t + 1].copy(),  # CleanRL's real_next_obs = next_obs.copy()
                    action(rng),
                    np.ones(1),  # gymnasium's float64 rewards
                    done,
                    _infos(bool(done[0]), t),
                )
            )
        return out

    return calls


def atari_calls(steps: int, seed: int) -> list[Call]:
    """FrameStackObservation(4) stacks ``[1, 4, 84, 84]``: each shares 3 frames with the last."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (64, 84, 84), dtype=np.uint8)
    stack = pool[rng.integers(0, 64, 4)][None]
    out = []
    for t in range(steps):
        nxt = np.concatenate([stack[:, 1:], pool[rng.integers(0, 64, 1)][None]], axis=1)
        done = rng.random(1) < 0.002
        action = rng.integers(0, 4, 1)
        out.append((stack, nxt.copy(), action, np.ones(1), done, _infos(bool(done[0]), t)))
        stack = pool[rng.integers(0, 64, 4)][None] if done[0] else nxt
    return out


FORMS = {
    "cartpole": Form(
        "cartpole (dqn.py, c51.py)",
        gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        gym.spaces.Discrete(2),
        {"handle_timeout_termination": False},
        128,
        vector_calls(4, lambda rng: rng.integers(0, 2, 1)),
    ),
    "pendulum": Form(
        "pendulum (sac/td3/ddpg_continuous_action.py)",
        gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
        {"handle_timeout_termination": False},
        256,
        vector_calls(3, lambda rng: rng.uniform(-2, 2, (1, 1)).astype(np.float32)),
    ),
    "atari": Form(
        "atari (dqn_atari.py)",
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        gym.spaces.Discrete(4),
        {"optimize_memory_usage": True, "handle_timeout_termination": False},
        32,
        atari_calls,
    ),
}


def build(form: Form, capacity: int) -> dict[str, Any]:
    """SB3's and recollect's buffers, built as CleanRL builds SB3's, filled to capacity."""
    from stable_baselines3.common.buffers import ReplayBuffer

    import recollect.sb3

    fill = form.calls(capacity + 8, 0)
    out = {}
    for name, cls in (("sb3", ReplayBuffer), ("recollect", recollect.sb3.ReplayBuffer)):
        buf = cls(capacity, form.obs_space, form.act_space, "cpu", **form.kwargs)
        for call in fill:
            buf.add(*call)
        out[name] = buf
    return out


LOAD_CODE = "while True: pass"


@contextmanager
def load(processes: int) -> Iterator[None]:
    """Runs ``processes`` CPU-bound Python processes for the duration of the block."""
    procs = [
        subprocess.Popen([sys.executable, "-c", LOAD_CODE], stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    try:
        if procs:
            time.sleep(0.3)  # let them start spinning
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


def paired(
    sb3: Callable[[], object], ours: Callable[[], object], rounds: int, window_s: float
) -> tuple[float, float, float]:
    """Median seconds per call of ``sb3`` and ``ours`` and the median of their per-round
    ratio: each round times a short window of each (order alternating, ABBA), so the two
    windows of a round see the same load and the ratio cancels it."""
    for fn in (sb3, ours):
        _warm_up(fn, window_s)
    calls = [max(1, int(window_s / _once(fn))) for fn in (sb3, ours)]
    times: tuple[list[float], list[float]] = ([], [])
    ratios = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            this = [0.0, 0.0]
            for k in (0, 1) if r % 2 == 0 else (1, 0):
                fn, n = (sb3, ours)[k], calls[k]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                this[k] = (time.perf_counter() - t0) / n
                times[k].append(this[k])
            ratios.append(this[1] / this[0])
    finally:
        if gc_was:
            gc.enable()
    return float(np.median(times[0])), float(np.median(times[1])), float(np.median(ratios))


def _once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    return max((time.perf_counter() - t0) / 5, 1e-7)


def run_form(
    form: Form, bufs: dict[str, Any], rounds: int, window_s: float
) -> dict[str, tuple[float, float, float]]:
    """``{call: (sb3 s, recollect s, median ratio)}`` for ``add`` and ``sample``."""
    sb3, ours = bufs["sb3"], bufs["recollect"]
    n_sb3, n_ours = cycle(form.calls(256, 1)), cycle(form.calls(256, 1))
    return {
        "add": paired(lambda: sb3.add(*n_sb3()), lambda: ours.add(*n_ours()), rounds, window_s),
        "sample": paired(
            lambda: sb3.sample(form.batch), lambda: ours.sample(form.batch), rounds, window_s
        ),
    }


def profile_add(form: Form, bufs: dict[str, Any], calls: int = 20_000) -> None:
    """Prints a cProfile of ``calls`` of recollect's ``add`` in ``form``'s call form."""
    ours, nxt = bufs["recollect"], cycle(form.calls(256, 1))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        ours.add(*nxt())
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    print(f"## {form.name}: {stats.total_calls / calls:.1f} function calls per add")
    stats.sort_stats("tottime").print_stats(12)
    print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--forms", default=",".join(FORMS), help="comma list of forms")
    parser.add_argument("--loads", default="0,1,4", help="comma list of busy processes")
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="paired rounds")
    parser.add_argument("--profile", action="store_true", help="cProfile recollect's add")
    args = parser.parse_args()
    # many short paired rounds: both buffers of a form see the same load in a round
    rounds = args.repeats or (21 if args.quick else 61)
    window_s = 0.002 if args.quick else 0.004
    capacity = args.capacity or (2_000 if args.quick else 10_000)
    th.set_num_threads(1)
    loads = [int(x) for x in args.loads.split(",")]
    import recollect

    print(f"# recollect {recollect.__version__} ({Path(recollect.__file__).parent})")
    print(
        f"# capacity {capacity}, {rounds} paired rounds, cpus {os.cpu_count()}; x sb3: median ratio"
    )
    head = f"{'form':<44} {'load':>6} {'call':<11} {'sb3 us':>9} {'recollect us':>13} {'x sb3':>7}"
    print(f"{head}\n{'-' * len(head)}", flush=True)
    for key in args.forms.split(","):
        form = FORMS[key]
        bufs = build(form, capacity)
        if args.profile:
            profile_add(form, bufs)
            continue
        for busy in loads:
            with load(busy):
                by = run_form(form, bufs, rounds, window_s)
            label = "idle" if not busy else f"{busy} busy"
            for call in ("add", "sample"):
                sb3, ours, ratio = by[call]
                print(
                    f"{form.name:<44} {label:>6} {call:<11} {sb3 * 1e6:>9.1f} "
                    f"{ours * 1e6:>13.1f} {ratio:>7.2f}",
                    flush=True,
                )
        del bufs


if __name__ == "__main__":
    main()
