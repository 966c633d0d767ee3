"""The ``recollect`` command line (click). Each subcommand lives in its own module."""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recollect")
def main() -> None:
    """recollect: experience replay for reinforcement learning."""


# Last, as each command module imports ``main`` to register its subcommand (in this order).
from recollect.cli import demo, populate, inspect, datasets, serve  # noqa: E402, F401, I001
