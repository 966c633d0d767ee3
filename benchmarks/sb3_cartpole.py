"""SB3 DQN on CartPole-v1 (rl-zoo hyperparameters): SB3's buffer vs recollect.sb3 buffers.

Trains, per seed, SB3's ``DQN`` with its own ``ReplayBuffer``, the same DQN with
``replay_buffer_class=recollect.sb3.ReplayBuffer``, and ``recollect.sb3.DQN``
(prioritized replay). Every ``--eval-every`` env steps the greedy policy is
evaluated on ``--eval-episodes`` episodes; the final policy on 20. Writes one
PNG with the learning curves (mean over seeds, min-max band) and a JSON with
every number, and prints the final evaluations per seed.

    python benchmarks/sb3_cartpole.py --seeds 0 1 2 --out runs/sb3_cartpole
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

# rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1
ZOO = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
}
ZOO_STEPS = 50_000
VARIANTS = ("sb3", "recollect", "recollect-per")


def evaluate(model: Any, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over ``episodes`` CartPole-v1 episodes."""
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def make_model(variant: str, seed: int) -> Any:
    """The DQN of ``variant`` (see ``VARIANTS``) with the rl-zoo hyperparameters."""
    from stable_baselines3 import DQN

    import recollect.sb3

    kwargs = dict(ZOO, policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu")
    if variant == "sb3":
        return DQN("MlpPolicy", "CartPole-v1", **kwargs)
    if variant == "recollect":
        cls = recollect.sb3.ReplayBuffer
        return DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=cls, **kwargs)
    if variant == "recollect-per":
        beta = recollect.LinearSchedule(0.4, 1.0, num_steps=ZOO_STEPS)
        return recollect.sb3.DQN(
            "MlpPolicy", "CartPole-v1", replay_buffer_kwargs={"beta": beta}, **kwargs
        )
    raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")


def run(variant: str, seed: int, steps: int, eval_every: int, eval_episodes: int) -> dict:
    """Trains one model in one ``learn`` call (so the exploration schedule is rl-zoo's).

    Returns its curve ``[(env steps, eval mean)]`` (evaluated every
    ``eval_every`` steps from a callback), the final evaluation and the time.
    """
    from stable_baselines3.common.callbacks import BaseCallback

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                self.curve.append((self.num_timesteps, evaluate(self.model, eval_episodes, seed)))
            return True

    th.set_num_threads(1)
    model = make_model(variant, seed)
    callback, t0 = Evaluate(), time.perf_counter()
    model.learn(steps, callback=callback)
    seconds = time.perf_counter() - t0
    final = evaluate(model, 20, seed + 1)
    return {
        "variant": variant,
        "seed": seed,
        "curve": callback.curve,
        "final": final,
        "seconds": seconds,
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in VARIANTS:
        runs = [r for r in results if r["variant"] == variant]
        if not runs:
            continue
        x = np.array([t for t, _ in runs[0]["curve"]])
        y = np.array([[v for _, v in r["curve"]] for r in runs])
        ax.plot(x, y.mean(axis=0), label=f"{variant} ({len(runs)} seeds)")
        ax.fill_between(x, y.min(axis=0), y.max(axis=0), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title("SB3 DQN, CartPole-v1, rl-zoo hyperparameters")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summary(r: dict) -> dict[str, float]:
    """Final eval, best eval, mean of the whole curve and of its second half, first step >= 475."""
    values = [v for _, v in r["curve"]]
    solved = [t for t, v in r["curve"] if v >= 475]
    return {
        "final": r["final"],
        "best": max(values),
        "curve_mean": float(np.mean(values)),
        "late_mean": float(np.mean(values[len(values) // 2 :])),
        "solved_at": solved[0] if solved else float("nan"),
    }


def report(results: list[dict], seeds: list[int], variants: list[str]) -> None:
    """Prints a markdown table per metric: one row per variant, one column per seed."""
    for metric in ("final", "best", "curve_mean", "late_mean", "solved_at"):
        print(f"\n{metric}:\n| variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |")
        print("| --- |" + " --- |" * (len(seeds) + 1))
        for variant in variants:
            runs = [r for r in results if r["variant"] == variant and r["seed"] in seeds]
            values = [summary(r)[metric] for r in runs]
            cells = " | ".join(f"{v:.1f}" if metric != "solved_at" else f"{v:.0f}" for v in values)
            print(f"| {variant} | {cells} | {np.mean(values):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=ZOO_STEPS)
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_cartpole"))
    parser.add_argument("--report-only", action="store_true", help="re-plot OUT/results.json")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.report_only:
        results = json.loads((args.out / "results.json").read_text())
    for seed in [] if args.report_only else args.seeds:
        for variant in args.variants:
            r = run(variant, seed, args.steps, args.eval_every, args.eval_episodes)
            results.append(r)
            final, secs = r["final"], r["seconds"]
            print(f"{variant:14s} seed {seed}: final eval {final:6.1f}  ({secs:.0f} s)", flush=True)
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "learning_curves.png")
    report(results, args.seeds, args.variants)
    print(f"\nwrote {args.out / 'learning_curves.png'} and {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
