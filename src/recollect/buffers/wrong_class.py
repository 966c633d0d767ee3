"""Names of another class's methods, kept on a buffer class so that calling them says which
call to make instead (``TransitionBuffer.add_batch``, ``ReplayBuffer.as_dataset``), and the
names that moved from :class:`~recollect.ReplayBuffer` to its collaborators (:data:`MOVED`)."""

from __future__ import annotations

import warnings
from typing import Any, NoReturn

from recollect.errors import WrongClassError

__all__ = ["MOVED", "OtherClassMethod", "moved_name"]


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


#: names that moved from :class:`~recollect.ReplayBuffer` to one of its collaborators (issue 37):
#: ``{old name: collaborator attribute}``; ``buffer.<old name>`` still works, with a
#: DeprecationWarning naming ``buffer.<collaborator>.<old name>``
MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "draw",
            "gather",
            "gather_row",
            "item_ids",
            "kind",
            "remote",
            "rng",
            "sampler",
            "sequence_length",
            "steps_per_row",
            "stream",
            "time_steps",
        ),
        "reader",
    ),
    **dict.fromkeys(("episode_aware", "flat_spec", "lock", "max_length", "write_leaves"), "writer"),
    **dict.fromkeys(
        ("check_saveable", "from_saved", "recovered_steps_dropped", "stored_layout"),
        "persistence",
    ),
}


def moved_name(buffer: Any, name: str) -> Any:
    """``ReplayBuffer.__getattr__`` (run only for names that are not attributes): a name
    that moved to a collaborator (:data:`MOVED`) is read there, with a DeprecationWarning
    naming the new path; any other name raises AttributeError."""
    owner = MOVED.get(name)
    collaborator = None if owner is None else vars(buffer).get(owner)
    if collaborator is None:
        for cls in type(buffer).__mro__:  # Python calls this after an OtherClassMethod raised
            other = vars(cls).get(name)
            if isinstance(other, OtherClassMethod):
                raise WrongClassError(other.message)
        raise AttributeError(f"'{type(buffer).__name__}' object has no attribute {name!r}")

    warnings.warn(
        f"ReplayBuffer.{name} is deprecated: use buffer.{owner}.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(collaborator, name)
