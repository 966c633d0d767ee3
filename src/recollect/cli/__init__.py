"""The ``recollect`` command line (click). Each subcommand lives in its own module."""

from __future__ import annotations

import importlib

import click

__all__ = ["main"]

_COMMAND_MODULES = ("demo", "populate", "inspect")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recollect")
def main() -> None:
    """recollect: experience replay for reinforcement learning."""


for _name in _COMMAND_MODULES:
    try:
        importlib.import_module(f"recollect.cli.{_name}")
    except ModuleNotFoundError as _err:  # a command module not written yet
        if _err.name != f"recollect.cli.{_name}":
            raise
