"""The ``recollect`` command line (click): wiring only. The group is in :mod:`.group`;
each subcommand lives in its own module and registers itself on it when imported.

Needs the ``cli`` extra (click, tqdm, matplotlib); a subcommand whose framework is
missing (torch, gymnasium, Ray) fails with the extra to install, not a traceback.
"""

from __future__ import annotations

# The group first: without click it raises MissingExtraError (naming the cli extra).
from recollect.cli.group import main

# isort: split
# Each command module registers its subcommand on ``main`` when imported (in this order).
from recollect.cli import demo, populate, inspect, datasets, serve  # noqa: F401, I001

__all__ = ["main"]
