"""``python -m recollect`` (and the ``recollect`` command) runs the command line."""

from __future__ import annotations

import sys

from recollect.extras import MissingExtraError


def run() -> None:
    """Entry point of the ``recollect`` command: without the ``cli`` extra it exits
    with status 1 and says what to install instead of a traceback."""
    try:
        from recollect.cli import main
    except MissingExtraError as err:
        sys.exit(f"recollect: {err}")
    main()


if __name__ == "__main__":
    run()
