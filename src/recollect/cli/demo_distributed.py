"""``recollect demo --distributed``: the Ape-X run, its ratio plot and its report.

Imported by :mod:`recollect.cli.demo` only when ``--distributed`` is given;
Ray comes in through :mod:`recollect.cli.ray_session` (a clear message when
the ``ray`` extra is missing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from recollect.cli.demo_outputs import Progress, out_summary, report, write_outputs
from recollect.cli.ray_session import import_ray, init_ray
from recollect.errors import RecollectError

__all__ = ["run_distributed", "table_summary"]


def table_summary(info: Any) -> dict[str, Any]:
    """The summary's ``buffer`` section from the served table's final ``TableInfo``."""
    return {
        "steps_stored": int(info.num_stored),
        "capacity": int(info.capacity),
        "episodes": int(info.num_episodes),
        "mean_return": None,
        "inserts": int(info.inserts),
        "samples": int(info.samples),
        "samples_per_insert": float(info.samples_per_insert),
        "insert_blocked_s": float(info.insert_blocked_s),
        "sample_blocked_s": float(info.sample_blocked_s),
    }


def _plot_ratio(path: Path, rates: list[tuple[float, int, int]], target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    t, inserts, samples = (np.asarray(c, np.float64) for c in zip(*rates, strict=True))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), dpi=100, sharex=True)
    ratio = np.divide(samples, inserts, out=np.zeros_like(samples), where=inserts > 0)
    top.plot(t, ratio, label="samples / inserts (cumulative)")
    k = min(4, len(t) - 1)  # over ~2 s: the rate limiter's balance, without the fill-up
    if k > 0:
        d_ins, d_smp = inserts[k:] - inserts[:-k], samples[k:] - samples[:-k]
        recent = np.divide(d_smp, d_ins, out=np.full_like(d_smp, np.nan), where=d_ins > 0)
        top.plot(t[k:], recent, alpha=0.6, label=f"samples / inserts (last {k} polls)")
    top.axhline(target, color="k", ls="--", lw=1, label=f"rate limiter target ({target:g})")
    top.set(ylabel="samples per insert", title="Ape-X on a served table: rate limiter balance")
    top.legend(loc="best")
    dt = np.maximum(np.diff(t), 1e-9)
    bottom.plot(t[1:], np.diff(inserts) / dt, label="inserts/s")
    bottom.plot(t[1:], np.diff(samples) / dt / target, label=f"samples/s / {target:g}")
    bottom.set(xlabel="seconds", ylabel="per second")
    bottom.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_distributed(
    args: dict[str, Any], actors: int, out: Path | None, quiet: bool, wall_start: float
) -> None:
    """Runs :func:`recollect.examples.apex.train` on a local loopback Ray and writes OUT.

    ``args`` are the single-process demo's ``Config`` fields; ``num_envs`` is per actor.
    """
    ray = import_ray()
    from recollect.examples import apex, dqn

    num_envs = args.pop("num_envs")
    cfg = apex.ApexConfig(**args, num_actors=actors, envs_per_actor=num_envs)
    try:
        dqn.make_env(cfg.env_id, 1).close()  # fail fast, before starting Ray
        init_ray(None, log_to_driver=False)
        header = (f"recollect demo --distributed: Ape-X DQN on {cfg.env_id}, {actors} actors x "
                  f"{num_envs} envs, seed {cfg.seed}")  # fmt: skip
        progress = Progress(cfg.total_steps, quiet, header)
        try:
            result = apex.train(cfg, progress)
        finally:
            progress.close()
            ray.shutdown()
        returns = dqn.evaluate(result.q_network, cfg.env_id, 20, cfg.seed + 10_000, cfg.device)
    except RecollectError as err:
        raise click.ClickException(str(err)) from None
    out = write_outputs(out, cfg, result, returns, table_summary(result.info), wall_start)
    _plot_ratio(out / "samples_per_insert.png", result.rates, cfg.samples_per_insert)
    report(out, out_summary(out))
    b = out_summary(out)["buffer"]
    click.echo(
        f"table: {b['inserts']:,} inserts, {b['samples']:,} samples (ratio "
        f"{b['samples_per_insert']:.2f}, target {cfg.samples_per_insert:g}); wrote "
        f"{out}/samples_per_insert.png"
    )
