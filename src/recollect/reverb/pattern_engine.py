"""The state machine behind ``StructuredWriter`` and ``PatternDataset``.

Reverb's C++ ``StructuredWriter`` keeps, per step field that some config reads,
the last N cells (N: the longest slice over that field); after each (partial)
step, and at the end of an episode, every config whose conditions all hold
builds its item from those cells unless a slice reaches past them or into a
step where the field was not given. A config makes at most one item per step;
``steps_since_applied`` counts the steps since it last made one. Cells are
whatever the caller stores (a writer's data references, a dataset's arrays);
``value_of`` reads a cell's array.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.reverb.errors import ReverbError
from recollect.reverb.patterns import config_problem, max_age, optional


class Item(NamedTuple):
    """An item a config made: its table, priority and per column the cells and squeeze."""

    table: str
    priority: float
    columns: list[list[Any]]
    squeeze: list[bool]


def _c_mod(left: int, mod: int) -> int:
    rest = abs(left) % mod
    return rest if left >= 0 else -rest


def _scalar_int(value: np.ndarray) -> int | None:
    """The value of a data-condition field: a one-element int or bool, else None."""
    if value.size != 1 or value.dtype.kind not in "biu":
        return None
    return int(value.reshape(-1)[:1].astype(np.int32)[0])


@dataclasses.dataclass
class _ConfigState:
    config: Any
    last_applied: tuple[int, int] | None = None
    last_checked: tuple[int, int] | None = None
    steps_since_applied: int = 0


class PatternEngine:
    """Applies ``configs`` to a stream of steps (see the module docstring).

    Raises:
        InvalidArgumentError (a ValueError): no configs, or an invalid one ("Invalid
            configuration at position 0: `start` must be < 0 but got 0.").
    """

    def __init__(self, configs: Sequence[Any], value_of: Callable[[Any], np.ndarray]) -> None:
        if not configs:
            raise InvalidArgumentError("At least one config must be provided.")
        for i, config in enumerate(configs):
            problem = config_problem(config)
            if problem:
                raise InvalidArgumentError(f"Invalid configuration at position {i}: {problem}")
        ages: list[int] = []
        for config in configs:
            indices = [(n.flat_source_index, max_age(n)) for n in config.flat]
            indices += [
                (c.flat_source_index, 1)
                for c in config.conditions
                if c.WhichOneof("left") == "flat_source_index"
            ]
            for idx, age in indices:
                ages.extend([0] * (idx + 1 - len(ages)))
                ages[idx] = max(ages[idx], age)
        self.ages = ages  # per step field: how many recent cells are kept (0: unused)
        self._value_of = value_of
        self._states = [_ConfigState(c) for c in configs]
        self._columns: list[deque[Any]] = [deque(maxlen=a) for a in ages]
        self.step_is_open = False
        self._episode = 0
        self._step = -1

    def used(self, flat: Sequence[Any]) -> list[Any]:
        """The values of the fields some config reads (None for the others), one per kept
        column (a step narrower than the configs read is padded with None)."""
        return [flat[i] if i < len(flat) and age else None for i, age in enumerate(self.ages)]

    def check_once(self, used: Sequence[Any], paths: Sequence[Any]) -> None:
        """Raises ReverbError (a RuntimeError) for a field already given in the open step."""
        if not self.step_is_open:
            return
        for i, value in enumerate(used):
            if value is not None and self._columns[i][-1] is not None:
                raise ReverbError(
                    f"A value for column {i} was provided by multiple Append/AppendPartial "
                    f"calls in the same step (path={paths[i]}). Give each field once per "
                    "step: None in the other partial appends."
                )

    def record(self, cells: Sequence[Any], partial_step: bool) -> list[Item]:
        """Stores one (partial) step's cells (None: not given); the items it makes."""
        if not self.step_is_open:
            self._step += 1
            for column, cell in zip(self._columns, cells, strict=True):
                column.append(cell)
        else:
            for column, cell in zip(self._columns, cells, strict=True):
                if cell is not None:
                    column[-1] = cell
        self.step_is_open = partial_step
        return self._apply(is_end_episode=False)

    def end_episode_items(self) -> list[Item]:
        """The items configs make at the episode's end (``is_end_episode`` conditions)."""
        return self._apply(is_end_episode=True)

    def new_episode(self, clear_buffers: bool) -> None:
        """Starts the next episode (step index 0 next); ``clear_buffers`` drops the cells."""
        if clear_buffers:
            for column in self._columns:
                column.clear()
        self.step_is_open = False
        self._episode += 1
        self._step = -1

    def _left(self, condition: Any, state: _ConfigState, is_end_episode: bool) -> int | None:
        left = condition.WhichOneof("left")
        if left == "step_index":
            return self._step
        if left == "steps_since_applied":
            return state.steps_since_applied
        if left == "buffer_length":
            return max(len(c) for c in self._columns)
        if left == "is_end_episode":
            return int(is_end_episode)
        idx = condition.flat_source_index
        column = self._columns[idx] if idx < len(self._columns) else None
        if not column or column[-1] is None:
            return None
        return _scalar_int(np.asarray(self._value_of(column[-1])))

    def _holds(self, condition: Any, state: _ConfigState, is_end_episode: bool) -> bool:
        left = self._left(condition, state, is_end_episode)
        if left is None:
            return False
        cmp = condition.WhichOneof("cmp")
        if cmp == "eq":
            result = left == condition.eq
        elif cmp == "ge":
            result = left >= condition.ge
        else:
            result = _c_mod(left, condition.mod_eq.mod) == condition.mod_eq.eq
        return bool(condition.inverse) != result

    def _trajectory(self, config: Any) -> list[tuple[list[Any], bool]] | None:
        """Each item column's references and squeeze flag; None when a slice reaches past
        the kept history or into a step where its field was not given."""
        out = []
        for node in config.flat:
            idx = node.flat_source_index
            history = list(self._columns[idx]) if idx < len(self._columns) else []
            start = optional(node, "start")
            if start is None:
                stop = optional(node, "stop")
                first, last, step = len(history) + stop, len(history) + stop + 1, 1
            else:
                first = len(history) + start
                last = len(history) + (optional(node, "stop") or 0)
                step = optional(node, "step") or 1
            if first < 0:
                return None
            refs = history[first:last:step]
            if not refs or any(r is None for r in refs):
                return None
            out.append((refs, start is None))
        return out

    def _priority(self, config: Any, trajectory: list[tuple[list[Any], bool]]) -> float:
        """The item's priority (see :func:`td_error`; its field's last column counts).

        Raises:
            InvalidArgumentError (a ValueError): no priority function, or a td_error field
                that is not a scalar float32/float64/int32/int64.
        """
        priority = config.priority
        kind = priority.WhichOneof("priority_fn")
        if kind == "constant_fn":
            return float(priority.constant_fn.value)
        if kind != "td_error":
            raise InvalidArgumentError(
                f"The Priority function undefined: config for table {config.table!r} has "
                "neither constant_fn nor td_error. Build configs with create_config."
            )
        td, value = priority.td_error, 0.0
        for node, (refs, _) in zip(config.flat, trajectory, strict=True):
            if node.flat_source_index != td.flat_source_index:
                continue
            arrays = [np.asarray(self._value_of(r)) for r in refs]
            for a in arrays:
                if a.dtype.name not in ("float32", "float64", "int32", "int64"):
                    raise InvalidArgumentError(
                        f"TD Error expects a double/float/int tensor and it is {a.dtype}: "
                        f"step field {td.flat_source_index} (cast it to float32)."
                    )
                if a.size != 1:
                    raise InvalidArgumentError(
                        f"TD Error expects a scalar tensor; step field {td.flat_source_index} "
                        f"has shape {a.shape}."
                    )
            errors = np.abs(np.asarray(arrays, np.float64))
            w = td.max_priority_weight
            value = float(w * errors.max() + (1 - w) * errors.mean())
        return value

    def _apply(self, is_end_episode: bool) -> list[Item]:
        items: list[Item] = []
        if not any(c and c[-1] is not None for c in self._columns):
            return items
        current = (self._episode, self._step)
        for state in self._states:
            if state.last_applied == current:
                continue
            if state.last_checked != current:
                state.steps_since_applied += 1
                state.last_checked = current
            config = state.config
            if not all(self._holds(c, state, is_end_episode) for c in config.conditions):
                continue
            trajectory = self._trajectory(config)
            if trajectory is None:
                continue
            items.append(
                Item(
                    config.table,
                    self._priority(config, trajectory),
                    [refs for refs, _ in trajectory],
                    [squeeze for _, squeeze in trajectory],
                )
            )
            state.last_applied = current
            state.steps_since_applied = 0
        return items
