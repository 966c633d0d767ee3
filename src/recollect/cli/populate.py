"""``recollect populate``: pre-fill a replay buffer with a baseline policy and checkpoint it.

Steps follow the RLDS layout: ``observation, action, reward, discount,
is_first, is_last, is_terminal``. An episode of ``L`` actions is stored as
``L + 1`` steps; the last one holds the final observation (``is_last``) with
a zero action and reward. Several envs (``--num-envs``) advance in lockstep,
one ``add_batch`` per step.

When the command finishes it closes every open episode with its final step
(``is_last``, not ``is_terminal``: a truncation), so a later ``--append`` never
joins an old episode to a new one.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from recollect.cli.group import count_option, main
from recollect.errors import RecollectError
from recollect.specs import ArraySpec, spec_from_space

__all__ = ["Collector", "load_policy", "populate", "rlds_step_spec"]


def rlds_step_spec(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """The RLDS step spec of a gymnasium env."""
    return {
        "observation": spec_from_space(observation_space),
        "action": spec_from_space(action_space),
        "reward": ArraySpec((), np.float32),
        "discount": ArraySpec((), np.float32),
        "is_first": ArraySpec((), np.bool_),
        "is_last": ArraySpec((), np.bool_),
        "is_terminal": ArraySpec((), np.bool_),
    }


def load_policy(name: str, envs: list[Any]) -> Callable[[np.ndarray], Any]:
    """``"random"`` (each env's action space, seeded) or ``"module:callable"``.

    The module is looked up on ``sys.path`` and, first, in the current directory
    (an installed ``recollect`` script does not put it on ``sys.path``).

    Raises:
        click.ClickException: the module or callable cannot be found.
    """
    if name == "random":
        return lambda obs: np.stack([np.asarray(env.action_space.sample()) for env in envs])
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise click.ClickException(f"--policy must be 'random' or 'module:callable'; got {name!r}.")
    cwd_added = os.getcwd() not in sys.path
    if cwd_added:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise click.ClickException(f"cannot load policy {name!r}: {err}") from err
    finally:
        if cwd_added:
            sys.path.remove(os.getcwd())
    if not callable(obj):
        raise click.ClickException(f"policy {name!r} is not callable.")
    return obj


class Collector:
    """Steps ``num_envs`` gymnasium envs in lockstep and yields RLDS step batches.

    Attributes:
        returns, lengths: lists of finished episodes' returns and lengths (actions).
    """

    def __init__(self, envs: list[Any], policy: Callable[[np.ndarray], Any], seed: int) -> None:
        self.envs, self.policy = envs, policy
        n = len(envs)
        for i, env in enumerate(envs):
            env.action_space.seed(seed + i)
        self.obs = np.stack([np.asarray(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)])
        self.is_first = np.ones(n, bool)
        self.final = np.zeros(n, bool)  # next step of this env is its final observation
        self.terminal = np.zeros(n, bool)
        self._ret, self._len = np.zeros(n), np.zeros(n, np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def _actions(self, template: Any) -> np.ndarray:
        actions = np.asarray(self.policy(self.obs))
        if actions.ndim == np.ndim(template) and len(self.envs) == 1:
            actions = actions[None]
        return actions

    def step(self) -> dict[str, np.ndarray]:
        """Advances every env by one step and returns the batch of steps it recorded."""
        n = len(self.envs)
        template = self.envs[0].action_space.sample()
        actions = self._actions(template)
        rewards, discounts = np.zeros(n, np.float32), np.zeros(n, np.float32)
        batch = {
            "observation": self.obs.copy(),
            "action": np.where(self.final.reshape(-1, *[1] * (actions.ndim - 1)), 0, actions),
            "is_first": self.is_first.copy(),
            "is_last": self.final.copy(),
            "is_terminal": self.final & self.terminal,
        }
        for i, env in enumerate(self.envs):  # envs step one by one (gymnasium API)
            if self.final[i]:
                self.obs[i] = env.reset()[0]
                self.is_first[i], self.final[i] = True, False
                discounts[i] = 0.0 if self.terminal[i] else 1.0
                continue
            obs, reward, terminated, truncated, _ = env.step(actions[i])
            self.obs[i], rewards[i], discounts[i] = obs, reward, 0.0 if terminated else 1.0
            self.is_first[i] = False
            self._ret[i] += reward
            self._len[i] += 1
            if terminated or truncated:
                self.final[i], self.terminal[i] = True, bool(terminated)
                self.returns.append(float(self._ret[i]))
                self.lengths.append(int(self._len[i]))
                self._ret[i], self._len[i] = 0.0, 0
        batch["reward"], batch["discount"] = rewards, discounts
        return batch

    def close_episodes(self) -> dict[str, np.ndarray]:
        """The final step of every env's open episode (the collection ends; a truncation).

        Its observation is the pending one, with a zero action and reward and
        ``is_last``; ``is_terminal`` only where the env had terminated.
        """
        n = len(self.envs)
        template = np.asarray(self.envs[0].action_space.sample())
        return {
            "observation": self.obs.copy(),
            "action": np.zeros((n, *template.shape), template.dtype),
            "reward": np.zeros(n, np.float32),
            "discount": np.where(self.final & self.terminal, 0.0, 1.0).astype(np.float32),
            "is_first": self.is_first.copy(),
            "is_last": np.ones(n, bool),
            "is_terminal": self.final & self.terminal,
        }


def _make_envs(env_id: str, num_envs: int) -> list[Any]:
    try:
        import gymnasium
    except ImportError:
        raise click.ClickException(
            "populate needs gymnasium: pip install 'recollect[gym]'."
        ) from None
    try:
        return [gymnasium.make(env_id) for _ in range(num_envs)]
    except gymnasium.error.Error as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise click.ClickException(f"unknown environment {env_id!r}: {first_line}") from err


def _check_steps(steps_per_run: int, num_envs: int) -> None:
    if steps_per_run % num_envs:
        lo = steps_per_run - steps_per_run % num_envs
        hint = f"use {lo} or {lo + num_envs}" if lo else f"use {num_envs}"
        raise click.BadParameter(
            f"--steps-per-run {steps_per_run} is not a multiple of --num-envs {num_envs} "
            f"(each iteration adds one step per env); {hint}.",
            param_hint="--steps-per-run",
        )


def _open_buffer(manager: Any, path: Path, overwrite: bool, append: bool) -> Any:
    """``(buffer, observer)``: the checkpoint at ``path`` continued, replaced or refused."""
    if append:
        return manager.create_or_load_replay_buffer()
    if manager.has_checkpoint() and not overwrite:
        raise click.ClickException(
            f"{path} already holds a checkpoint; pass --append to continue it, --overwrite "
            "to replace it, or choose another --buffer-name."
        )
    return manager.create_replay_buffer(overwrite=overwrite)


@main.command()
@click.option("--env", "env_id", required=True, help="gymnasium env id, e.g. CartPole-v1.")
@click.option(
    "--policy",
    default="random",
    show_default=True,
    help="'random' or 'module:callable' (observation batch -> actions); the module is "
    "also looked up in the current directory.",
)
@click.option(
    "--buffer-name",
    default="replay-buffer",
    show_default=True,
    help="the checkpoint is written to CHECKPOINT_DIR/BUFFER_NAME.",
)
@count_option(
    "--capacity",
    None,
    "replay buffer capacity in steps over all envs, a multiple of --num-envs  "
    "[default: 50000; with --append: the checkpoint's]",
)
@count_option(
    "--steps-per-run",
    672,
    "steps added per run over all envs (a multiple of --num-envs); a checkpoint follows every run.",
)
@count_option("--num-runs", 10, "runs.")
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="directory that holds the buffer's checkpoint directory.",
)
@count_option(
    "--num-envs",
    None,
    "envs stepped in lockstep = buffer env rows  [default: 1; with --append: the checkpoint's]",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="seeds env i with SEED + i and the buffer's sampling rng; with --append use "
    "another seed than before, or the envs replay the same episodes.",
)
@click.option(
    "--overwrite", is_flag=True, help="replace an existing checkpoint at DIR/BUFFER_NAME."
)
@click.option(
    "--append",
    is_flag=True,
    help="continue an existing checkpoint at DIR/BUFFER_NAME (created when missing).",
)
@click.option(
    "--progress/--no-progress", default=True, show_default=True, help="show a progress bar."
)
@click.option(
    "--from-dataset", help="Minari dataset id to load first; collection continues after it."
)
def populate(
    env_id: str,
    policy: str,
    buffer_name: str,
    capacity: int | None,
    steps_per_run: int,
    num_runs: int,
    checkpoint_dir: str,
    num_envs: int | None,
    seed: int,
    overwrite: bool,
    append: bool,
    progress: bool,
    from_dataset: str | None,
) -> None:
    """Pre-populate a replay buffer with a baseline policy; checkpoint it to DIR/BUFFER_NAME.

    An existing checkpoint there is refused unless --overwrite (start over) or
    --append (add to it) is given.
    """
    from tqdm import tqdm

    from recollect.buffers import ReplayBuffer
    from recollect.manager import ReplayBufferManager

    if overwrite and append:
        raise click.UsageError("pass --overwrite or --append, not both.")
    if num_envs is not None:
        _check_steps(steps_per_run, num_envs)
    envs = _make_envs(env_id, 1)  # the spec; the other envs once num_envs is known
    path = Path(checkpoint_dir) / buffer_name
    spec = rlds_step_spec(envs[0].observation_space, envs[0].action_space)
    if not (append and ReplayBufferManager(checkpoint_dir=path).has_checkpoint()):
        capacity, num_envs = capacity or 50_000, num_envs or 1
    start = time.perf_counter()
    try:
        with ReplayBufferManager(spec, capacity, path, num_envs=num_envs, rng=seed) as manager:
            if from_dataset:
                from recollect.cli.datasets import seed_from_dataset

                if append or (manager.has_checkpoint() and not overwrite):
                    raise click.UsageError(
                        f"--from-dataset starts a new buffer; {path} exists (pass --overwrite "
                        "to replace it) or --append was given."
                    )
                # not --append: set above
                assert capacity is not None and num_envs is not None
                seed_from_dataset(from_dataset, spec, capacity, num_envs, seed, path)
                buffer, observer = manager.load_replay_buffer()
            else:
                buffer, observer = _open_buffer(manager, path, overwrite, append)
            assert isinstance(buffer, ReplayBuffer)  # a manager without a client holds one
            capacity, num_envs = buffer.capacity, buffer.num_envs
            _check_steps(steps_per_run, num_envs)
            envs += _make_envs(env_id, num_envs - 1)
            collector = Collector(envs, load_policy(policy, envs), seed)
            iterations = steps_per_run // num_envs
            with tqdm(total=steps_per_run * num_runs, unit="step", disable=not progress) as bar:
                for run in range(num_runs):
                    for _ in range(iterations):
                        observer(collector.step())
                        bar.update(num_envs)
                    if run == num_runs - 1:
                        observer(collector.close_episodes())
                    manager.checkpoint()
            stored = manager.num_frames()
    except RecollectError as err:
        raise click.ClickException(str(err)) from err
    finally:
        for env in envs:
            env.close()
    returns = np.asarray(collector.returns)
    mean = f"{returns.mean():.2f}" if len(returns) else "n/a"
    click.echo(
        f"populated {path}: {observer.num_steps} steps added (the last {num_envs} close the "
        f"open episodes), {stored} stored (capacity {capacity}), {len(returns)} episodes "
        f"finished, mean return {mean}, {time.perf_counter() - start:.2f} s"
    )
