"""What ``recollect demo`` shows and writes: the progress bar, metrics.csv, the learning
curve, summary.json and the closing report (shared by the local and the distributed demo).
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

__all__ = ["Progress", "out_summary", "report", "write_outputs"]


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
