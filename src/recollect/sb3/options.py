"""Checks of the SB3 buffers' constructor options that SB3 does not have
(``n_step``/``n_steps``, ``storage``/``directory``, ``compression``)."""

from __future__ import annotations

from typing import Any

from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError

__all__ = ["check_storage", "codecs_of", "n_step_of"]


def n_step_of(n_step: Any, n_steps: Any) -> int:
    """The n-step length from ``n_step`` or SB3's spelling ``n_steps`` (default 1).

    Raises:
        InvalidArgumentError: both given and different, or not a positive int.
    """
    if n_step is not None and n_steps is not None and n_step != n_steps:
        raise InvalidArgumentError(
            f"pass n_step or its SB3 spelling n_steps, not both; got n_step={n_step}, "
            f"n_steps={n_steps}."
        )
    n = n_step if n_step is not None else (n_steps if n_steps is not None else 1)
    return positive_int("n_step", n)


def codecs_of(compression: Any) -> Any:
    """``compression`` as ``{leaf path: codec}``: one codec (a name, codec object or
    config dict) is the observation's."""
    if compression is not None and not (
        isinstance(compression, dict) and "name" not in compression
    ):
        return {"observation": compression}
    return compression


def check_storage(storage: str, directory: Any) -> dict[str, Any]:
    """``TransitionBuffer`` storage keywords: ``{}`` for ``"numpy"`` without a directory,
    ``{"storage": "memmap", "directory": directory}`` for memmap with one.

    Raises:
        InvalidArgumentError: another storage, a memmap without a directory, or a
            directory without memmap.
    """
    if storage == "numpy" and directory is None:
        return {}
    if storage == "memmap" and directory is not None:
        return {"storage": storage, "directory": directory}
    raise InvalidArgumentError(
        f"`storage` must be 'numpy' or 'memmap' and `directory` comes with memmap only "
        f"(required there); got storage={storage!r}, directory={directory!r}."
    )
