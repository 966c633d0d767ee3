"""``recollect serve``: serves the tables of a TOML file as Ray actors until Ctrl-C.

The schema is in :mod:`recollect.cli.table_config`; an example with every option
ships in the package (``recollect/cli/tables.toml``): ``recollect serve
--example-config`` prints it. Ray is imported only when the command runs.
"""

from __future__ import annotations

import os
import signal
import threading
from importlib.resources import files
from pathlib import Path
from typing import Any

import click

from recollect.cli.group import main
from recollect.cli.ray_session import init_ray
from recollect.cli.table_config import ConfigError, load_service_config
from recollect.errors import RecollectError

__all__ = ["connect_snippet", "example_config", "serve"]


def example_config() -> str:
    """The example TOML file of tables, with every option commented (shipped in the wheel)."""
    return files("recollect.cli").joinpath("tables.toml").read_text(encoding="utf-8")


def connect_snippet(address: str, name: str, token_auth: bool) -> str:
    """The Python lines another process of the cluster runs to reach the service.

    ``token_auth``: the cluster requires Ray's auth token (Ray >= 2.5x starts
    local clusters with it); a process joining by address must then set
    ``RAY_AUTH_MODE=token`` and find the token (``~/.ray/auth_token`` on this
    machine, or ``RAY_AUTH_TOKEN``).
    """
    lines = ["import os"]
    if token_auth:  # before importing ray, which reads it at import
        lines.append('os.environ["RAY_AUTH_MODE"] = "token"  # token: ~/.ray/auth_token')
    if address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost"):  # a loopback cluster
        init = f'ray.init(address="{address}", _node_ip_address="127.0.0.1")'
    else:
        init = f'ray.init(address="{address}", _node_ip_address=None)  # None: Ray finds the IP'
    lines += ["import ray", "import recollect.ray", init]
    lines.append(f'client = recollect.ray.connect("{name}")')
    return "\n".join(lines)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


@main.command()
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file of tables (schema and every option: recollect serve --example-config).",
)
@click.option(
    "--example-config",
    "print_example",
    is_flag=True,
    help="Print an example TOML file of tables (every option, commented) and exit.",
)
@click.option(
    "--ray-address",
    default=None,
    help="Join this Ray cluster (e.g. auto). Default: start a private local Ray on 127.0.0.1.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Shards restore from it at start; Ctrl-C checkpoints there before stopping.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Leave the service running in the cluster and exit (needs --ray-address).",
)
def serve(
    config_path: Path | None,
    print_example: bool,
    ray_address: str | None,
    checkpoint_dir: Path | None,
    detach: bool,
) -> None:
    """Serve the tables of a TOML file as Ray actors.

    Prints the Ray address and the recollect.ray.connect(...) line that
    writers and learners use, then serves until Ctrl-C (checkpointing to
    --checkpoint-dir first when given), or exits at once with --detach.
    """
    if print_example:
        click.echo(example_config(), nl=False)
        return
    if config_path is None:
        raise click.UsageError(
            "serve needs --config FILE.toml; recollect serve --example-config > tables.toml "
            "writes an example to start from."
        )
    if detach and ray_address is None:
        raise click.UsageError(
            "--detach needs --ray-address: a Ray started by this command stops when it exits."
        )
    try:
        config = load_service_config(config_path)
    except ConfigError as err:
        raise click.ClickException(str(err)) from None
    address = init_ray(ray_address)
    client = _start(config, checkpoint_dir, detach)
    tables = ", ".join(
        f"{t} ({b.capacity:,} steps, {b.num_envs} envs, {config.num_shards[t]} shard(s))"
        for t, b in config.tables.items()
    )
    click.echo(f"serving {tables}")
    click.echo(f"ray address: {address}")
    click.echo(f"service name: {config.name}")
    token_auth = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"  # set by ray.init
    click.echo("connect from Python:\n" + connect_snippet(address, config.name, token_auth))
    if detach:
        click.echo(f'stop it with recollect.ray.connect("{config.name}") ... ray.kill, or '
                   "by stopping the cluster.")  # fmt: skip
        return
    click.echo("serving; Ctrl-C to stop.", nl=True)
    _wait_for_signal()
    _stop(client, checkpoint_dir)


def _start(config: Any, checkpoint_dir: Path | None, detach: bool) -> Any:
    import recollect.ray

    try:
        return recollect.ray.serve(
            config.tables,
            num_shards=config.num_shards,
            name=config.name,
            placement=config.placement,
            checkpoint_dir=checkpoint_dir,
            lease_timeout=config.lease_timeout_s,
            max_restarts=config.max_restarts,
            detached=detach,
        )
    except RecollectError as err:
        raise click.ClickException(str(err)) from None


def _stop(client: Any, checkpoint_dir: Path | None) -> None:
    try:
        if checkpoint_dir is not None:
            click.echo(f"checkpointing to {client.checkpoint(checkpoint_dir)}")
    finally:
        client.close()
        click.echo("stopped.")
