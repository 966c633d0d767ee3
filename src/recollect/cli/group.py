"""The ``recollect`` click group every subcommand registers on (imported by each command module).

A command whose optional module is missing (torch, gymnasium, Ray) fails with a usage
error naming the extra to install, not a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from recollect.extras import missing_extra

try:
    import click
except ImportError as err:
    raise missing_extra(err, "the recollect command line") from None

__all__ = ["count_option", "main"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _Commands(click.Group):
    """A click group whose commands turn a missing optional module into a usage error
    naming the extra that installs it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as err:
            error = missing_extra(err, f"recollect {ctx.invoked_subcommand or ''}".strip())
            if error is err:
                raise
            raise click.ClickException(str(error)) from None


def count_option(flag: str, default: int | None, help: str) -> Callable[[_F], _F]:
    """The click option ``flag``: an int >= 1 (click rejects others with a usage error);
    ``--help`` shows its default unless None (then ``help`` says what applies)."""
    return click.option(
        flag, type=click.IntRange(min=1), default=default, show_default=default is not None,
        help=help,
    )  # fmt: skip


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="recollect")
def main() -> None:
    """recollect: experience replay for reinforcement learning."""
