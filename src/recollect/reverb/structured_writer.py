"""``reverb.structured_writer``: items made from static patterns over the step stream.

A pattern says, per item column, which slice of which step field's recent
history it holds (``ref_step['obs'][-3:]``: the last three observations;
``ref_step['reward'][-1]``: the latest reward, no time axis). A config pairs a
pattern with a table, a priority and conditions; after every ``append`` (and in
``end_episode``, for ``Condition.is_end_episode()``) each config whose
conditions all hold makes one item, unless its columns reach past the kept
history or into steps where the field was not given. A config makes at most one
item per step.

    >>> ref = create_reference_step({'obs': None, 'reward': None})
    >>> config = create_config({'obs': ref['obs'][-2:], 'reward': ref['reward'][-1]},
    ...                        table='queue', conditions=[Condition.step_index() % 2 == 1])
    >>> with client.structured_writer([config]) as writer:   # doctest: +SKIP
    ...     writer.append({'obs': obs, 'reward': reward})

Configs are :class:`~recollect.reverb.patterns.Config` values (Reverb's
``patterns_pb2`` messages are accepted too). Data goes through the same
:class:`~recollect.reverb.stream.WriterStream` as ``TrajectoryWriter``'s.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any, SupportsInt, cast

import numpy as np
import optree

from recollect.arguments import is_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import patterns as _patterns
from recollect.reverb import signature as _signature
from recollect.reverb.errors import ReverbError
from recollect.reverb.info import TensorSpec
from recollect.reverb.pattern_engine import Item, PatternEngine
from recollect.reverb.patterns import (
    ConditionProto,
    Config,
    ConstantPriorityFn,
    ModuloEq,
    PatternNode,
    Priority,
    TDError,
    flat_nodes,
    optional,
    pattern_structure,
    same_structures,
    structure_of,
)
from recollect.reverb.patterns import (
    StructuredWriterConfig as StructuredWriterConfig,  # re-exported (see __all__)
)
from recollect.reverb.stream import StreamWriter, WriterStream

Pattern = Any  # a nest of PatternNode
ReferenceStep = Any  # a nest of _RefNode


class _RefNode:
    """One step field in a reference step: indexing it makes a :class:`PatternNode`."""

    def __init__(self, idx: int) -> None:
        self._idx = idx

    def __getitem__(self, key: int | slice) -> PatternNode:
        if is_int(key) and not isinstance(key, slice):
            key = slice(int(key))
        elif not isinstance(key, slice):
            raise InvalidArgumentError(
                f"Key must be int or slice by got {key} (type {type(key)}). Index a reference "
                "step field like a sequence: x[-1], x[-3:], x[-6::2]."
            )
        return PatternNode(self._idx, key.start, key.stop, key.step)


def create_reference_step(step_structure: Any) -> ReferenceStep:
    """``step_structure`` (the structure ``append`` gets; leaves may be None) with each
    leaf replaced by a helper that builds :class:`PatternNode` s when indexed."""
    n = len(_signature.flatten(step_structure))
    return _signature.unflatten_as(step_structure, [_RefNode(i) for i in range(n)])


def pattern_from_transform(
    step_structure: Any, transform: Callable[[ReferenceStep], Pattern]
) -> Pattern:
    """The pattern ``transform`` builds from the reference step of ``step_structure``."""
    return transform(create_reference_step(step_structure))


def constant_priority_fn(value: float) -> Priority:
    """A priority function giving every item ``value``."""
    return Priority(constant_fn=ConstantPriorityFn(float(value)))


def td_error(
    max_priority_weight: float,
    step_structure: Any,
    get_field_from_step_fn: Callable[[Any], Any],
) -> Priority:
    """A priority ``w * max|td| + (1 - w) * mean|td|`` (``w = max_priority_weight``) over
    the item column read from the step field ``get_field_from_step_fn`` picks.

    The field must appear in the pattern (once); items without it get priority 0.
    """
    n = len(_signature.flatten(step_structure))
    index = get_field_from_step_fn(_signature.unflatten_as(step_structure, list(range(n))))
    return Priority(td_error=TDError(float(max_priority_weight), int(index)))


def create_config(
    pattern: Pattern,
    table: str,
    conditions: Sequence[ConditionProto] = (),
    priority: Priority | None = None,
) -> Config:
    """A :class:`Config`: items of ``pattern`` into ``table`` when all ``conditions`` hold
    (priority: ``constant_priority_fn(1.0)`` unless given). Checked by
    ``Client.structured_writer``."""
    return Config(
        flat=flat_nodes(pattern),
        pattern_structure=structure_of(pattern),
        table=table,
        priority=constant_priority_fn(1.0) if priority is None else priority,
        conditions=tuple(conditions),
    )


def unpack_pattern(config: Any) -> Pattern:
    """The pattern nest of ``config`` (its ``flat`` list when it has no structure)."""
    structure = pattern_structure(config)
    if structure is None:
        return list(config.flat)
    return optree.tree_unflatten(structure, list(config.flat))


def _node_shape(node: Any, spec: Any) -> tuple:
    shape = tuple(_signature.shape_tuple(spec.shape) or ())
    start = optional(node, "start")
    if start is None:
        return shape
    stop, step = optional(node, "stop") or 0, optional(node, "step") or 1
    return (len(range(start, stop, step)), *shape)


def _spec(shape: tuple, dtype: np.dtype, name: str) -> Any:
    tf = sys.modules.get("tensorflow")
    if tf is not None:  # TensorFlow is in use: Reverb's tf.TensorSpec
        return tf.TensorSpec(shape=shape, dtype=tf.as_dtype(dtype), name=name)
    return TensorSpec(shape, dtype, name)


def infer_signature(configs: Sequence[Any], step_spec: Any) -> Any:
    """The table signature of the items ``configs`` make from steps like ``step_spec``.

    ``step_spec``: a nest of specs or arrays (anything with ``shape`` and ``dtype``)
    shaped like the appended steps. Returns the pattern nest with ``tf.TensorSpec``
    leaves when TensorFlow is imported, else ``recollect.reverb.info.TensorSpec``;
    a column whose length differs between configs gets a None leading dimension.

    Raises:
        InvalidArgumentError (a ValueError): no configs; configs of different pattern
            structures or tables; a column with different dtypes or incompatible shapes.
    """
    if not configs:
        raise InvalidArgumentError("At least one config must be provided.")
    if not same_structures(configs):
        raise InvalidArgumentError("All configs must have exactly the same pattern_structure.")
    if any(c.table != configs[0].table for c in configs):
        raise InvalidArgumentError(
            "All configs must target the same table but provided configs included "
            f"{', '.join(sorted({c.table for c in configs}))}."
        )
    flat_spec = _signature.flatten(step_spec)
    patterns = [unpack_pattern(c) for c in configs]
    paths, _, treedef = optree.tree_flatten_with_path(patterns[0], none_is_leaf=True)
    per_pattern = [optree.tree_leaves(p, none_is_leaf=True) for p in patterns]
    out = []
    for i, path in enumerate(paths):
        nodes = [leaves[i] for leaves in per_pattern]
        specs = [flat_spec[n.flat_source_index] for n in nodes]
        dtypes = [_signature.numpy_dtype(s.dtype) for s in specs]
        if any(d != dtypes[0] for d in dtypes):
            raise InvalidArgumentError(
                f"Configs produce trajectories with multiple dtypes at {path}. Got "
                f"{[_signature.dtype_name(d) for d in dtypes]}. (Every config must read the "
                "same dtype into this column.)"
            )
        shapes = [_node_shape(n, s) for n, s in zip(nodes, specs, strict=True)]
        if any(len(s) != len(shapes[0]) for s in shapes) or (
            len(shapes[0]) > 1 and any(s[1:] != shapes[0][1:] for s in shapes)
        ):
            raise InvalidArgumentError(
                f"Configs produce trajectories with incompatible shapes at {path}. Got "
                f"{shapes}. (The shapes may differ in the time axis only.)"
            )
        merged = shapes[0] if all(s == shapes[0] for s in shapes) else (None, *shapes[0][1:])
        out.append(_spec(merged, dtypes[0], "/".join(str(x) for x in path)))
    return optree.tree_unflatten(treedef, out)


class _ConditionBuilder:
    """A condition's ``left`` side; comparing it (``== != < <= > >=``) makes the condition,
    ``% n`` first makes ``==`` / ``!=`` compare the rest (Reverb keeps the modulus only
    for those two)."""

    def __init__(self, condition: ConditionProto, mod: int = 0) -> None:
        self._condition = condition
        self._mod = mod

    def __mod__(self, cmp: int) -> _ConditionBuilder:
        return _ConditionBuilder(self._condition, int(cmp))

    # ``==`` and ``!=`` build a ConditionProto (Reverb's builder API), not a bool: typed
    # Any so that they still override object's methods.
    def __eq__(self, cmp: object) -> Any:
        value = int(cast(SupportsInt, cmp))
        if self._mod:
            return dataclasses.replace(self._condition, mod_eq=ModuloEq(self._mod, value))
        return dataclasses.replace(self._condition, eq=value)

    def __ne__(self, cmp: object) -> Any:
        return dataclasses.replace(self == cmp, inverse=True)

    def __ge__(self, cmp: int) -> ConditionProto:
        return dataclasses.replace(self._condition, ge=int(cmp))

    def __gt__(self, cmp: int) -> ConditionProto:
        return self >= cmp + 1

    def __le__(self, cmp: int) -> ConditionProto:
        return dataclasses.replace(self > cmp, inverse=True)

    def __lt__(self, cmp: int) -> ConditionProto:
        return self <= cmp - 1


class Condition:
    """Building blocks of conditions: ``Condition.step_index() % 2 == 0``."""

    @staticmethod
    def step_index() -> _ConditionBuilder:
        """The (zero-based) index of the most recent step within its episode."""
        return _ConditionBuilder(ConditionProto(step_index=True))

    @staticmethod
    def steps_since_applied() -> _ConditionBuilder:
        """Steps appended since the config last made an item (the current one included)."""
        return _ConditionBuilder(ConditionProto(steps_since_applied=True))

    @staticmethod
    def is_end_episode() -> ConditionProto:
        """True only inside ``end_episode``."""
        return ConditionProto(is_end_episode=True, eq=1)

    @staticmethod
    def data(step_structure: Any) -> Any:
        """``step_structure`` with a builder per leaf: the value of that field in the most
        recent step (a scalar integer or bool; anything else never satisfies it)."""
        n = len(_signature.flatten(step_structure))
        builders = [_ConditionBuilder(ConditionProto(flat_source_index=i)) for i in range(n)]
        return _signature.unflatten_as(step_structure, builders)


class StructuredWriter(StreamWriter):
    """Appends steps and makes items by static patterns (``Client.structured_writer``).

    Raises:
        InvalidArgumentError (a ValueError): an invalid config ("Invalid configuration at
            position 0: `start` must be < 0 but got 0.").
    """

    def __init__(self, channel: Any, configs: Sequence[Any]) -> None:
        self._engine = PatternEngine(configs, lambda ref: ref.numpy())
        super().__init__(WriterStream(channel, 1))
        for i, age in enumerate(self._engine.ages):
            self._stream.configure(i, max(age, 1))
        self._structure: Any = None
        self._width: int | None = None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None or not issubclass(exc_type, ReverbError):
                self.flush()
        finally:
            self.close()

    @property
    def step_is_open(self) -> bool:
        """True if ``partial_step`` was set in the most recent ``append``."""
        return self._engine.step_is_open

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends one step (``partial_step``: more of its fields follow) and makes the items
        whose conditions hold. Every step must flatten to the same number of leaves (None
        leaves allowed); fields no config reads are not stored.

        Raises:
            InvalidArgumentError (a ValueError): a different number of leaves than the
                first step ("Flattened data has an unexpected length").
            SpecError (a ValueError): a field whose dtype or shape differs from its first
                value ("Tensor of wrong dtype provided for column 0 (path=('a',)).").
            ReverbError (a RuntimeError): a field given twice in one step.
        """
        paths, flat, _ = optree.tree_flatten_with_path(data, none_is_leaf=True)
        if self._width is None:
            self._width, self._structure = len(flat), paths
        if len(flat) != self._width:
            raise InvalidArgumentError(
                f"Flattened data has an unexpected length, got {len(flat)} but wanted "
                f"{self._width}."
            )
        used = self._engine.used(flat)
        self._engine.check_once(used, self._structure)
        refs = self._append(used, partial_step, lambda i: f"{i} (path={self._structure[i]})")
        self._create(self._engine.record(refs, partial_step))

    def _create(self, items: list[Item]) -> None:
        for item in items:
            self._stream.create_item(item.table, item.priority, item.columns, item.squeeze)

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Makes the items of configs whose conditions hold at the episode's end (the
        ``is_end_episode`` ones), sends every queued item and starts a new episode (step
        index 0 next); ``clear_buffers=False`` keeps the history so that items may span
        episodes.

        Raises:
            DeadlineExceededError: ``timeout_ms`` passed first (the episode ends all the same).
        """
        self._create(self._engine.end_episode_items())
        try:
            self._stream.end_episode(clear_buffers, timeout_ms)
        finally:
            self._engine.new_episode(clear_buffers)

    def close(self) -> None:
        """Sends what the tables take now and releases the writer's server-side state."""
        self._stream.close()


__all__ = [
    "Condition",
    "StructuredWriter",
    "constant_priority_fn",
    "create_config",
    "create_reference_step",
    "infer_signature",
    "pattern_from_transform",
    "td_error",
    "unpack_pattern",
]
__all__ += _patterns.__all__  # the pattern types re-exported here
