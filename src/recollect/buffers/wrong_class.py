"""Names of another class's methods, kept on a buffer class so that calling them says which
call to make instead (``TransitionBuffer.add_batch``, ``ReplayBuffer.as_dataset``)."""

from __future__ import annotations

from typing import Any, NoReturn

from recollect.errors import WrongClassError

__all__ = ["OtherClassMethod"]


class OtherClassMethod:
    """A class attribute standing for another class's method (``as_dataset =
    OtherClassMethod("...")``): reading it raises :class:`~recollect.errors.WrongClassError`
    (an ``AttributeError``, so ``hasattr`` stays False) with ``message``, which names the
    call to make instead."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> NoReturn:
        raise WrongClassError(self.message)
