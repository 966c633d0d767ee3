"""Reverb's structured-writer configs (``patterns.proto``) as plain Python values.

A :class:`Config` says how a :class:`~recollect.reverb.structured_writer.StructuredWriter`
turns its stream of steps into items: ``flat`` holds one :class:`PatternNode` per
item column (a slice of one step field's recent history), ``pattern_structure``
the nest those columns form, ``table`` and ``priority`` where and how the item
goes, and ``conditions`` (:class:`ConditionProto`) when it is made. The classes
keep the protobuf field names and the ``HasField`` / ``WhichOneof`` accessors,
so code written against Reverb's messages reads them unchanged; the writer also
accepts Reverb's own ``patterns_pb2`` messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import optree


class _Message:
    """``HasField`` / ``WhichOneof`` over dataclass fields (None: unset)."""

    _ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def HasField(self, name: str) -> bool:  # protobuf's name
        value = getattr(self, name)
        return value is not None and value is not False

    def WhichOneof(self, group: str) -> str | None:  # protobuf's name
        return next((n for n in self._ONEOFS[group] if self.HasField(n)), None)


@dataclass(frozen=True)
class PatternNode(_Message):
    """One item column: ``flat_source_index``'s history sliced like a Python sequence.

    ``start``/``stop``/``step`` count back from the most recent step: ``x[-1]`` is
    ``stop=-1`` (one squeezed step, no time axis), ``x[-3:]`` is ``start=-3`` (the
    last three steps), ``x[-6::2]`` is ``start=-6, step=2``. None means unset.
    """

    flat_source_index: int = 0
    start: int | None = None
    stop: int | None = None
    step: int | None = None


@dataclass(frozen=True)
class ModuloEq(_Message):
    """``left % mod == eq`` (C semantics: a negative ``left`` leaves a negative rest)."""

    mod: int = 0
    eq: int = 0


@dataclass(frozen=True)
class ConditionProto(_Message):
    """One condition: a ``left`` value compared with ``eq``, ``ge`` or ``mod_eq``.

    ``left`` is one of ``step_index`` (the step's index in its episode),
    ``steps_since_applied`` (steps since the config last made an item, this one
    included), ``buffer_length`` (the longest kept column history),
    ``is_end_episode`` (1 inside ``end_episode``, else 0) or ``flat_source_index``
    (the scalar integer or bool value of that step field). ``inverse`` negates.
    """

    _ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {
        "left": (
            "step_index",
            "steps_since_applied",
            "buffer_length",
            "is_end_episode",
            "flat_source_index",
        ),
        "cmp": ("eq", "ge", "mod_eq"),
    }

    step_index: bool = False
    steps_since_applied: bool = False
    buffer_length: bool = False
    is_end_episode: bool = False
    flat_source_index: int | None = None
    eq: int | None = None
    ge: int | None = None
    mod_eq: ModuloEq | None = None
    inverse: bool = False


@dataclass(frozen=True)
class ConstantPriorityFn(_Message):
    """Every item gets priority ``value``."""

    value: float = 0.0


@dataclass(frozen=True)
class TDError(_Message):
    """Priority ``w * max|td| + (1 - w) * mean|td|`` over the item column read from step
    field ``flat_source_index`` (0.0 when the item has no such column)."""

    max_priority_weight: float = 0.0
    flat_source_index: int = 0


@dataclass(frozen=True)
class Priority(_Message):
    """How a config's items are prioritized: ``constant_fn`` or ``td_error``."""

    _ONEOFS: ClassVar[dict[str, tuple[str, ...]]] = {"priority_fn": ("constant_fn", "td_error")}

    constant_fn: ConstantPriorityFn | None = None
    td_error: TDError | None = None


@dataclass(frozen=True)
class Config(_Message):
    """Reverb's ``StructuredWriterConfig`` (see the module docstring).

    ``pattern_structure``: the pattern's tree structure (an ``optree.PyTreeSpec``;
    None: the pattern is the flat list ``flat``).
    """

    flat: tuple[PatternNode, ...] = ()
    pattern_structure: Any = None
    table: str = ""
    priority: Priority = dataclasses.field(default_factory=Priority)
    conditions: tuple[ConditionProto, ...] = ()


#: Reverb's name of the config message.
StructuredWriterConfig = Config


def optional(message: Any, name: str) -> Any:
    """``message.name``, or None when the (proto or ours) field is unset."""
    return getattr(message, name) if message.HasField(name) else None


def max_age(node: Any) -> int:
    """How many recent steps of its field ``node`` reads."""
    start = optional(node, "start")
    return abs(start if start is not None else optional(node, "stop") or 0)


def _problem_with_node(node: Any) -> str | None:
    start, stop, step = (optional(node, n) for n in ("start", "stop", "step"))
    if node.flat_source_index < 0:
        return f"`flat_source_index` must be >= 0 but got {node.flat_source_index}."
    if start is None and stop is None:
        return "At least one of `start` and `stop` must be specified."
    if start is not None and start >= 0:
        return f"`start` must be < 0 but got {start}."
    if stop is not None and stop > 0:
        return f"`stop` must be <= 0 but got {stop}."
    if start is not None and stop is not None and start >= stop:
        return f"`stop` ({stop}) must be > `start` ({start}) when both are specified."
    if start is None and stop == 0:
        return f"`stop` must be < 0 when `start` isn't set but got {stop}."
    if step is not None and start is None:
        return "`step` must only be set when `start` is set."
    if step is not None and step <= 0:
        return f"`step` must be > 0 but got {step}."
    return None


def _problem_with_condition(condition: Any) -> str | None:
    left, cmp = condition.WhichOneof("left"), condition.WhichOneof("cmp")
    if left is None:
        return "Conditions must specify a value for `left`."
    if left == "flat_source_index" and condition.flat_source_index < 0:
        return f"flat_source_index must be >= 0 but got {condition.flat_source_index}."
    if cmp == "mod_eq":
        if condition.mod_eq.mod <= 0:
            return f"`mod_eq.mod` must be > 0 but got {condition.mod_eq.mod}."
        if condition.mod_eq.eq < 0:
            return f"`mod_eq.eq` must be >= 0 but got {condition.mod_eq.eq}."
    if cmp is None:
        return "Conditions must specify a value for `cmp`."
    if left == "is_end_episode" and (cmp != "eq" or condition.eq != 1):
        return "Condition must use `eq=1` when using `is_end_episode`."
    return None


def config_problem(config: Any) -> str | None:
    """What makes ``config`` invalid (Reverb's phrase), or None."""
    if not config.flat:
        return "`flat` must not be empty."
    if not config.table:
        return "`table` must not be empty."
    for node in config.flat:
        problem = _problem_with_node(node)
        if problem:
            return problem
    for condition in config.conditions:
        problem = _problem_with_condition(condition)
        if problem:
            return problem
    return None


def pattern_structure(config: Any) -> Any:
    """The config's structure: an ``optree.PyTreeSpec`` (None: flat), read from ours or
    from Reverb's proto (decoded with TensorFlow's structure coder)."""
    structure = config.pattern_structure
    if structure is None or isinstance(structure, optree.PyTreeSpec):
        return structure
    if not config.HasField("pattern_structure"):  # a Reverb proto without a structure
        return None
    from tensorflow.python.saved_model import nested_structure_coder

    decoded = nested_structure_coder.decode_proto(structure)
    return optree.tree_structure(decoded, none_is_leaf=True)


def structure_of(pattern: Any) -> Any:
    """The tree structure of a pattern (its leaves are :class:`PatternNode`)."""
    return optree.tree_structure(pattern, none_is_leaf=True)


def flat_nodes(pattern: Any) -> tuple[Any, ...]:
    return tuple(optree.tree_leaves(pattern, none_is_leaf=True))


def same_structures(configs: Sequence[Any]) -> bool:
    structures = [pattern_structure(c) for c in configs]
    return all(s == structures[0] for s in structures)


__all__ = [
    "ConditionProto",
    "Config",
    "ConstantPriorityFn",
    "ModuloEq",
    "PatternNode",
    "Priority",
    "StructuredWriterConfig",
    "TDError",
]
