"""``python -m recollect`` runs the command line."""

from recollect.cli import main

main()
