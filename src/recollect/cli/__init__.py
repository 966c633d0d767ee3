"""The ``recollect`` command line (click): wiring only. The group is in :mod:`.group`;
each subcommand lives in its own module and registers itself on it when imported.

Needs the ``cli`` extra (click, tqdm, matplotlib); a subcommand whose framework is
missing (torch, gymnasium, Ray) fails with the extra to install, not a traceback.
"""

from __future__ import annotations

# Each command module registers its subcommand on ``main`` when imported.
from recollect.cli import datasets, demo, inspect, populate, serve  # noqa: F401
from recollect.cli.group import main

__all__ = ["main"]
