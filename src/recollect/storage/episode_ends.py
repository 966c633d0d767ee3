"""Which stored steps end an episode: a buffer's ``episode_end`` option, resolved on its spec.

An episode-aware buffer (table, frame store, checkpoint) knows one leaf of every step
that marks an episode's end:

- the RLDS layout: a top-level bool scalar ``is_last`` leaf, found without being asked;
- any bool scalar leaf, named by its path (``episode_end="done"``);
- a scalar integer (or bool) leaf and the value that marks the end: TF-Agents'
  ``Trajectory`` steps end an episode on their boundary step, ``step_type == LAST``
  (``episode_end=("step_type", 2)``), where Reverb's ``ReverbAddTrajectoryObserver``
  ends its items.

A window may end on such a step but never holds one before its last step.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import numpy as np

from recollect.errors import DTypeError, InvalidArgumentError, InvalidArgumentTypeError, SpecError
from recollect.specs import FlatSpec

__all__ = ["EpisodeEnd", "episode_end_config", "refuse_compressed", "resolve_episode_end"]

#: the RLDS leaf an episode-aware spec is recognised by (a bool scalar)
IS_LAST = "is_last"


@dataclasses.dataclass(frozen=True)
class EpisodeEnd:
    """The leaf whose value marks the steps that end an episode.

    Attributes:
        index: the leaf's position in the flattened spec.
        path: the leaf's path (e.g. ``"is_last"``, ``"step_type"``).
        value: None for a bool leaf (True ends an episode); else the leaf value that
            ends one (TF-Agents' ``StepType.LAST`` is 2).
    """

    index: int
    path: str
    value: int | bool | None = None

    def flags(self, leaf: Any) -> Any:
        """Bool flags of the steps that end an episode: ``leaf`` itself for a bool leaf,
        else ``leaf == value`` (same shape; a 0-d leaf gives a numpy bool)."""
        return leaf if self.value is None else leaf == self.value

    def config(self) -> str | list[Any]:
        """JSON description: the path of a bool leaf, else ``[path, value]``."""
        return self.path if self.value is None else [self.path, self.value]


def _scalar_leaf(flat: FlatSpec, path: Any, kinds: str, what: str) -> int:
    """Index of the scalar leaf ``path`` whose dtype kind is in ``kinds``.

    Raises:
        InvalidArgumentTypeError: ``path`` is not a string.
        SpecError: no leaf has that path, or it is not a scalar.
        DTypeError: its dtype is of another kind.
    """
    if not isinstance(path, str):
        raise InvalidArgumentTypeError(
            f"`episode_end` names a leaf by its path (a str such as 'is_last' or "
            f"'step_type'); got {path!r} of type {type(path).__name__}."
        )
    if path not in flat.paths:
        raise SpecError(
            f"`episode_end` names leaf '{path}', which the spec does not have; leaves are "
            f"{flat.paths}. Name the leaf that marks episode ends."
        )
    i = flat.index(path)
    if flat.shapes[i] != ():
        raise SpecError(
            f"`episode_end` leaf '{path}' must be a scalar (one flag per step); got shape "
            f"{flat.shapes[i]}. Name a scalar leaf."
        )
    if flat.dtypes[i].kind not in kinds:
        raise DTypeError(
            f"`episode_end` leaf '{path}' must be {what}; got dtype {flat.dtypes[i]}. "
            "Name a bool leaf, or an integer leaf with the value that ends an episode "
            "(episode_end=('step_type', 2))."
        )
    return i


def _end_value(flat: FlatSpec, i: int, value: Any) -> int | bool:
    """``value`` as the Python int (bool for a bool leaf) the leaf ``i`` stores exactly.

    Raises:
        InvalidArgumentTypeError: not an integer (a bool for a bool leaf).
        InvalidArgumentError: outside the leaf dtype's range.
    """
    path, dtype = flat.paths[i], flat.dtypes[i]
    if dtype.kind == "b":
        if not isinstance(value, bool | np.bool_):
            raise InvalidArgumentTypeError(
                f"`episode_end` value of bool leaf '{path}' must be True or False; got {value!r}."
            )
        return bool(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentTypeError(
            f"`episode_end` value of leaf '{path}' ({dtype}) must be an int; got {value!r} "
            f"of type {type(value).__name__}."
        )
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise InvalidArgumentError(
            f"`episode_end` value {int(value)} cannot be stored in leaf '{path}' ({dtype}, "
            f"values {info.min}..{info.max}): no step would end an episode. Give a value "
            "the leaf holds."
        )
    return int(value)


def resolve_episode_end(flat: FlatSpec, option: Any = None) -> EpisodeEnd | None:
    """Resolves a buffer's ``episode_end`` option on its flattened spec.

    Args:
        flat: the buffer's flattened spec.
        option: None: the top-level bool scalar ``is_last`` leaf when the spec has one
            (else not episode-aware); False: not episode-aware; a path: that bool scalar
            leaf; ``(path, value)`` (a tuple or a 2-list, as ``config()`` stores it): the
            scalar integer or bool leaf at ``path`` ends an episode where it equals
            ``value``; an :class:`EpisodeEnd` is returned as it is.

    Returns:
        The :class:`EpisodeEnd`, or None when the buffer is not episode-aware.

    Raises:
        InvalidArgumentTypeError: an option of another form, a path that is not a str,
            a value that is not an int (a bool for a bool leaf).
        SpecError: no leaf at the path, a leaf that is not a scalar, or (option None) an
            ``is_last`` leaf that is not a bool scalar.
        DTypeError: a named leaf of another dtype (a path: not bool; a pair: not an
            integer or bool).
        InvalidArgumentError: a value outside the leaf dtype's range.
    """
    if isinstance(option, EpisodeEnd):
        return option
    if option is None:
        if IS_LAST not in flat.paths:
            return None
        i = flat.index(IS_LAST)
        if flat.shapes[i] != () or flat.dtypes[i] != np.bool_:
            raise SpecError(
                f"data_spec leaf 'is_last' marks episode ends and must be a bool scalar; "
                f"got shape {flat.shapes[i]}, dtype {flat.dtypes[i]}. Rename it, or pass "
                "episode_end=False to opt out of episode-aware sampling."
            )
        return EpisodeEnd(i, IS_LAST)
    if option is False:
        return None
    if isinstance(option, str):
        return EpisodeEnd(_scalar_leaf(flat, option, "b", "a bool (True ends an episode)"), option)
    if isinstance(option, tuple | list) and len(option) == 2:
        path, value = option
        i = _scalar_leaf(flat, path, "biu", "an integer or bool scalar")
        return EpisodeEnd(i, path, _end_value(flat, i, value))
    raise InvalidArgumentTypeError(
        f"`episode_end` must be None (a bool 'is_last' leaf when the spec has one), False "
        f"(no episode ends), a bool leaf's path, or (path, value) (e.g. ('step_type', 2) "
        f"for TF-Agents trajectories); got {option!r}."
    )


def episode_end_config(option: Any, resolved: EpisodeEnd | None) -> str | list[Any] | bool | None:
    """What a buffer's ``config()`` keeps of its ``episode_end`` option: None when none was
    given (the spec decides again when the buffer is rebuilt: configurations of buffers
    made before the option existed stay the same), False, or ``resolved.config()``."""
    if option is None:
        return None
    return False if resolved is None else resolved.config()


def refuse_compressed(end: EpisodeEnd | None, codecs: dict[int, Any]) -> dict[int, Any]:
    """``codecs`` (``{leaf index: codec}``), checked: the episode-end leaf stays uncompressed.

    Raises:
        InvalidArgumentError: ``codecs`` compresses the ``episode_end`` leaf.
    """
    if end is not None and end.index in codecs:
        raise InvalidArgumentError(
            f"compression['{end.path}']: the episode_end leaf stays uncompressed (the table "
            "reads it at every write); compress the large leaves only, e.g. the observation."
        )
    return codecs
