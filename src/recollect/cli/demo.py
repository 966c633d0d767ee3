"""``recollect demo``: trains a Double DQN on CartPole from a ReplayBuffer, end to end.

torch, gymnasium, tqdm and matplotlib are imported only when the command runs,
so ``recollect --help`` stays fast and works without the ``demo`` extra.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from recollect.cli import main
from recollect.errors import RecollectError

__all__ = ["Progress", "buffer_summary", "demo", "out_summary", "report", "write_outputs"]

_DEFAULTS = {"steps": 100_000, "num_envs": 4, "batch_size": 64, "capacity": 100_000, "seed": 2}


def buffer_summary(buffer: Any) -> dict[str, Any]:
    """Steps stored, complete episodes stored and their mean return, read back from ``buffer``.

    An episode counts when both its ``is_first`` and its ``is_last`` step are
    still stored (older parts may have been overwritten by the ring).
    """
    from recollect.cli.inspect import episode_stats  # here: keeps the commands' import order

    flat = buffer.flat_spec
    returns = episode_stats(flat, flat.treedef.flatten_up_to(buffer.gather_all()))["returns"]
    return {
        "steps_stored": int(buffer.num_frames()),
        "capacity": int(buffer.capacity),
        "num_envs": int(buffer.num_envs),
        "episodes": int(returns.size),
        "mean_return": float(returns.mean()) if returns.size else None,
    }


def _check_device(device: str) -> None:
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise click.BadParameter(str(err), param_hint="--device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter("CUDA is not available on this machine.", param_hint="--device")


class Progress:
    """tqdm bar over env steps; shows episodes, recent mean return, loss and steps/s.

    The bar opens on the first step, so set-up errors print without a bar.
    """

    def __init__(self, total: int, quiet: bool, header: str):
        self.total, self.quiet, self.header = total, quiet, header
        self.bar: Any = None  # a tqdm bar once the first step comes
        self._shown, self._last_postfix = 0, 0.0

    def __call__(self, info: dict[str, Any]) -> None:
        if self.bar is None:
            from tqdm.auto import tqdm

            if not self.quiet:
                click.echo(self.header)
            self.bar = tqdm(total=self.total, unit="step", disable=self.quiet, dynamic_ncols=True)
        self.bar.update(info["env_steps"] - self._shown)
        self._shown = info["env_steps"]
        now = time.perf_counter()
        if now - self._last_postfix > 0.5:
            self._last_postfix = now
            postfix = {"episodes": info["episodes"], "return": f"{info['recent_return']:.1f}"}
            if "samples_per_insert" in info:  # the distributed demo's table rates
                postfix["ins/s"] = f"{info['inserts_per_s']:,.0f}"
                postfix["smp/s"] = f"{info['samples_per_s']:,.0f}"
                postfix["smp/ins"] = f"{info['samples_per_insert']:.1f}"
            self.bar.set_postfix(postfix, loss=f"{info['loss']:.3f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _write_metrics(path: Path, result: Any) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["kind", "env_steps", "episode", "return", "length"])
        for i, (steps, ret, length) in enumerate(result.episodes, 1):
            out.writerow(["train", steps, i, ret, length])
        for steps, ret in result.evaluations:
            out.writerow(["eval", steps, "", ret, ""])


def _plot(path: Path, result: Any, env_id: str, threshold: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if result.episodes:
        steps, returns, _ = (np.asarray(c) for c in zip(*result.episodes, strict=True))
        ax.plot(steps, returns, ".", ms=3, alpha=0.35, label="training episode return")
        window = min(20, len(returns))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, lw=2, label=f"mean of last {window}")
    if result.evaluations:
        ax.plot(*zip(*result.evaluations, strict=True), "o-", ms=4, label="greedy evaluation")
    if threshold is not None:
        ax.axhline(threshold, color="k", ls="--", lw=1, label=f"solved ({threshold:g})")
    ax.set(xlabel="env steps", ylabel="episode return", title=f"Double DQN on {env_id}")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def report(out: Path, summary: dict[str, Any]) -> None:
    b, e = summary["buffer"], summary["evaluation"]
    stop = "stopped early: solved" if summary["stopped_early"] else "ran all steps"
    mean_return = "n/a" if b["mean_return"] is None else f"{b['mean_return']:.1f}"
    lines = [
        f"trained {summary['env_steps']:,} env steps in {summary['train_seconds']:.1f} s "
        f"({summary['steps_per_second']:,.0f} steps/s, {summary['updates']:,} updates; {stop})",
        f"replay buffer: {b['steps_stored']:,} steps stored (capacity {b['capacity']:,}), "
        f"{b['episodes']:,} complete episodes, mean return {mean_return}",
        f"evaluation: mean return {e['mean_return']:.1f} over {e['episodes']} greedy episodes "
        f"(min {e['min_return']:g}, max {e['max_return']:g})",
        f"wall time: {summary['wall_seconds']:.1f} s",
        f"wrote {out}/learning_curve.png, metrics.csv, summary.json",
    ]
    click.echo("\n".join(lines))


@main.command()
@click.option(
    "--env",
    "env_id",
    default="CartPole-v1",
    show_default=True,
    help="gymnasium env id (discrete actions, Box observations).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=_DEFAULTS["steps"],
    show_default=True,
    help="Most env steps, all envs together; stops earlier once evaluation solves it.",
)
@click.option(
    "--num-envs",
    type=click.IntRange(min=1),
    default=_DEFAULTS["num_envs"],
    show_default=True,
    help="Parallel envs (gymnasium.vector) = buffer env rows.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=_DEFAULTS["batch_size"],
    show_default=True,
    help="Windows of 2 steps per gradient update.",
)
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    default=_DEFAULTS["capacity"],
    show_default=True,
    help="Replay buffer capacity in steps (a multiple of --num-envs).",
)
@click.option(
    "--seed",
    type=int,
    default=_DEFAULTS["seed"],
    show_default=True,
    help="Seeds envs, exploration, network and replay sampling (runs are deterministic).",
)
@click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cpu, cuda.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output directory  [default: runs/demo-<timestamp>/]",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--distributed",
    is_flag=True,
    help="Ape-X: --actors Ray actor processes write to a served prioritized table "
    "(needs recollect[ray]); --num-envs is then per actor.",
)
@click.option(
    "--actors",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Actor processes of --distributed.",
)
def demo(
    env_id: str,
    steps: int,
    num_envs: int,
    batch_size: int,
    capacity: int,
    seed: int,
    device: str,
    out: Path | None,
    quiet: bool,
    distributed: bool,
    actors: int,
) -> None:
    """Train a Double DQN on CartPole from a recollect ReplayBuffer, end to end.

    Collects from NUM_ENVS parallel envs into a ReplayBuffer through an
    observer, trains on windows of 2 steps, evaluates 20 greedy episodes and
    writes learning_curve.png, metrics.csv and summary.json into OUT.

    With --distributed, ACTORS Ray actor processes collect into a prioritized
    table served by recollect.ray.serve on a local Ray (loopback only) and the
    learner samples it (Ape-X); samples_per_insert.png is written too.
    """
    wall_start = time.perf_counter()
    import torch

    _check_device(device)
    torch.set_num_threads(1)  # a small MLP trains fastest on one thread
    args = dict(env_id=env_id, total_steps=steps, num_envs=num_envs, batch_size=batch_size,
                capacity=capacity, seed=seed, device=device)  # fmt: skip
    if distributed:
        from recollect.cli.demo_distributed import run_distributed

        run_distributed(args, actors, out, quiet, wall_start)
        return
    from recollect.examples import dqn

    cfg = dqn.Config(
        env_id=env_id,
        total_steps=steps,
        num_envs=num_envs,
        batch_size=batch_size,
        capacity=capacity,
        seed=seed,
        device=device,
    )
    try:
        dqn.make_env(env_id, 1).close()  # fail fast, before creating the output directory
        header = f"recollect demo: Double DQN on {env_id}, {num_envs} envs, seed {seed}"
        progress = Progress(steps, quiet, header)
        try:
            result = dqn.train(cfg, progress)
        finally:
            progress.close()
        returns = dqn.evaluate(result.q_network, env_id, 20, seed + 10_000, device)
    except RecollectError as err:
        raise click.ClickException(str(err)) from None
    out = write_outputs(out, cfg, result, returns, buffer_summary(result.buffer), wall_start)
    report(out, out_summary(out))


def write_outputs(out: Path | None, cfg: Any, result: Any, returns: np.ndarray,
                  buffer: dict[str, Any], wall_start: float) -> Path:  # fmt: skip
    """Writes metrics.csv, learning_curve.png and summary.json; returns the directory."""
    out = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    threshold = _threshold(cfg.env_id)
    _write_metrics(out / "metrics.csv", result)
    _plot(out / "learning_curve.png", result, cfg.env_id, threshold)
    summary = _summary(cfg, result, returns, threshold, time.perf_counter() - wall_start)
    summary["buffer"] = buffer
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return out


def out_summary(out: Path) -> dict[str, Any]:
    """The summary.json written by :func:`write_outputs`."""
    return json.loads((out / "summary.json").read_text())


def _threshold(env_id: str) -> float | None:
    import gymnasium as gym

    return gym.spec(env_id).reward_threshold


def _summary(cfg: Any, result: Any, returns: np.ndarray, threshold: Any, wall: float) -> dict:
    return {
        "env": cfg.env_id,
        "seed": cfg.seed,
        "env_steps": result.env_steps,
        "updates": result.updates,
        "train_seconds": result.train_seconds,
        "steps_per_second": result.env_steps / result.train_seconds,
        "stopped_early": result.stopped_early,
        "periodic_evaluations": [{"env_steps": s, "mean_return": r} for s, r in result.evaluations],
        "evaluation": {
            "episodes": int(returns.size),
            "mean_return": float(returns.mean()),
            "min_return": float(returns.min()),
            "max_return": float(returns.max()),
            "solved_threshold": threshold,
        },
        "wall_seconds": wall,
        "config": dataclasses.asdict(cfg),
    }
