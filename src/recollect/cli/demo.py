"""``recollect demo``: trains a Double DQN on CartPole from a ReplayBuffer, end to end.

torch, gymnasium, tqdm and matplotlib are imported only when the command runs,
so ``recollect --help`` stays fast and works without the ``demo`` extra.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from recollect.cli.demo_outputs import Progress, out_summary, report, write_outputs
from recollect.cli.group import count_option, main
from recollect.errors import RecollectError

__all__ = ["Progress", "buffer_summary", "demo", "out_summary", "report", "write_outputs"]

_DEFAULTS = {"steps": 100_000, "num_envs": 4, "batch_size": 64, "capacity": 100_000, "seed": 2}


def buffer_summary(buffer: Any) -> dict[str, Any]:
    """Steps stored, complete episodes stored and their mean return, read back from ``buffer``.

    An episode counts when both its ``is_first`` and its ``is_last`` step are
    still stored (older parts may have been overwritten by the ring).
    """
    from recollect.cli.inspect import episode_stats  # here: keeps the commands' import order

    flat = buffer.writer.flat_spec
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


@main.command()
@click.option(
    "--env",
    "env_id",
    default="CartPole-v1",
    show_default=True,
    help="gymnasium env id (discrete actions, Box observations).",
)
@count_option(
    "--steps",
    _DEFAULTS["steps"],
    "Most env steps, all envs together; stops earlier once evaluation solves it.",
)
@count_option(
    "--num-envs", _DEFAULTS["num_envs"], "Parallel envs (gymnasium.vector) = buffer env rows."
)
@count_option("--batch-size", _DEFAULTS["batch_size"], "Windows of 2 steps per gradient update.")
@count_option(
    "--capacity",
    _DEFAULTS["capacity"],
    "Replay buffer capacity in steps (a multiple of --num-envs).",
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
@count_option("--actors", 4, "Actor processes of --distributed.")
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
    # the Config fields set from the command line (also apex.ApexConfig's, --distributed)
    args: dict[str, Any] = dict(env_id=env_id, total_steps=steps, num_envs=num_envs,
                                batch_size=batch_size, capacity=capacity, seed=seed,
                                device=device)  # fmt: skip
    if distributed:
        from recollect.cli.demo_distributed import run_distributed

        run_distributed(args, actors, out, quiet, wall_start)
        return
    from recollect.examples import dqn

    cfg = dqn.Config(**args)
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
