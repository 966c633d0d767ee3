"""A :class:`~recollect.TransitionBuffer` read as the ``deque`` of transition tuples it replaces.

``append(transition)`` takes the tuple a ``deque(maxlen=N)`` replay memory holds, in
``add``'s field order, and remembers its *form* (plain tuple or the user's namedtuple
class, and its length); reading one stored transition (``buf[i]``, ``random.sample``,
iteration) gives it back in that form:

===========  =====================================================================
length       fields
===========  =====================================================================
4            ``(observation, action, reward, next_observation)``: stored with
             ``terminated=False, truncated=False`` (a type with no done field)
5            ``(observation, action, reward, next_observation, done)``: ``done`` is
             stored as ``terminated`` (``truncated=False``) and read back from it
6            ``(observation, action, reward, next_observation, terminated, truncated)``
===========  =====================================================================

A buffer written only with ``add`` reads back :class:`Transition` namedtuples (6 fields).
"""

from __future__ import annotations

import collections
import dataclasses
import operator
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np
import optree

from recollect.buffers.transition_sample import TransitionSample
from recollect.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    NotEnoughDataError,
    StateError,
)

__all__ = [
    "ItemForm",
    "SequenceHost",
    "Transition",
    "TransitionSequence",
    "form_of",
    "items_of",
]

#: Transitions read per gather while iterating a TransitionBuffer.
ITER_CHUNK = 256


class Transition(NamedTuple):
    """One stored transition as a :class:`~recollect.TransitionBuffer` written with ``add``
    reads back (``buf[i]``); values are the stored numpy arrays and scalars."""

    observation: Any
    action: Any
    reward: Any
    next_observation: Any
    terminated: Any
    truncated: Any


#: Field positions of ``add``'s order (observation, action, reward, next_observation, ...).
_REWARD, _NEXT = 2, 3


@dataclasses.dataclass(frozen=True)
class ItemForm:
    """How stored transitions are read back: ``cls(*fields)`` (a namedtuple class) or a plain
    tuple (``cls`` None), of ``length`` 4, 5 or 6 fields (module docstring)."""

    cls: type | None
    length: int

    def same_as(self, other: ItemForm) -> bool:
        """Whether both read back alike: the same length and class, or namedtuple classes of
        one name and fields (a form restored from a checkpoint and the user's class)."""
        if self.length != other.length or (self.cls is None) != (other.cls is None):
            return False
        if self.cls is None or other.cls is None or self.cls is other.cls:
            return True
        return (self.cls.__name__, _fields(self.cls)) == (other.cls.__name__, _fields(other.cls))

    def config(self) -> dict[str, Any]:
        """JSON-able: ``{"length", "name", "fields"}`` (name and fields None for tuples)."""
        cls = self.cls
        return {
            "length": self.length,
            "name": None if cls is None else cls.__name__,
            "fields": None if cls is None else list(_fields(cls)),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ItemForm:
        """The form :meth:`config` describes; a namedtuple class is rebuilt from its name and
        fields (the user's own class is adopted at the next ``append``).

        Raises:
            InvalidArgumentError: a length other than 4, 5 or 6, or fields of another count.
        """
        length, name, fields = int(config["length"]), config.get("name"), config.get("fields")
        if length not in (4, 5, 6) or (fields is not None and len(fields) != length):
            raise InvalidArgumentError(f"invalid TransitionBuffer item form {config!r}.")
        if fields is None:
            return cls(None, length)
        return cls(collections.namedtuple(str(name), [str(f) for f in fields]), length)

    def describe(self) -> str:
        kind = "tuples" if self.cls is None else f"{self.cls.__name__} namedtuples"
        return f"{kind} of {self.length} fields"

    def make(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """The item from the six values ``(obs, action, reward, next_obs, terminated,
        truncated)``."""
        fields = values[: self.length]
        return tuple(fields) if self.cls is None else self.cls(*fields)


#: The form of a buffer written only with ``add``.
DEFAULT_FORM = ItemForm(Transition, 6)


def form_of(transition: Any) -> ItemForm:
    """The form of an appended transition (a tuple or namedtuple of 4, 5 or 6 fields).

    Raises:
        InvalidArgumentTypeError: ``transition`` is not a tuple.
        InvalidArgumentError: another length, or a namedtuple whose field names put the
            reward or the next observation elsewhere than ``add``'s order (e.g. the PyTorch
            tutorial's ``(state, action, next_state, reward)``).
    """
    if not isinstance(transition, tuple):
        raise InvalidArgumentTypeError(
            "TransitionBuffer.append takes a tuple or namedtuple (observation, action, reward, "
            f"next_observation, done); got {type(transition).__name__}. Pass tuple(...), or call "
            "add(observation, action, reward, next_observation, terminated, truncated)."
        )
    if len(transition) not in (4, 5, 6):
        raise InvalidArgumentError(
            "TransitionBuffer.append takes (observation, action, reward, next_observation"
            "[, done]) or (..., terminated, truncated): 4, 5 or 6 fields; got "
            f"{len(transition)} fields."
        )
    fields = getattr(type(transition), "_fields", None)
    if fields is None:
        return ItemForm(None, len(transition))
    for i, name in enumerate(fields):
        lowered = str(name).lower()
        misplaced = ("reward" in lowered and i != _REWARD) or (
            lowered.startswith("next") and i != _NEXT
        )
        if misplaced:
            raise InvalidArgumentError(
                f"TransitionBuffer.append reads fields by position, in add's order (observation, "
                f"action, reward, next_observation, done); {type(transition).__name__} has "
                f"{name!r} at position {i} (fields {tuple(fields)}). Append "
                "(state, action, reward, next_state, done), or call add(...) by keyword."
            )
    return ItemForm(type(transition), len(transition))


def check_same_form(held: ItemForm | None, new: ItemForm) -> None:
    """Raises InvalidArgumentError when ``new`` differs from the form appended before."""
    if held is not None and not held.same_as(new):
        raise InvalidArgumentError(
            f"this TransitionBuffer holds {held.describe()} (from its first append); got "
            f"{new.describe()}. Append one form throughout, so that stored transitions read "
            "back alike."
        )


def add_args(transition: tuple[Any, ...]) -> tuple[Any, ...]:
    """``add``'s six arguments from an appended transition of 4, 5 or 6 fields."""
    if len(transition) == 4:
        return (*transition, False, False)
    if len(transition) == 5:
        return (*transition, False)
    return tuple(transition)


def items_of(sample: TransitionSample, form: ItemForm) -> list[tuple[Any, ...]]:
    """The ``B`` transitions of ``sample`` (fields ``[B, ...]``) as items of ``form``; each
    value is a view into the sample's arrays (a numpy scalar for a scalar leaf)."""
    columns = (
        sample.observation,
        sample.action,
        sample.reward,
        sample.next_observation,
        sample.terminated,
        sample.truncated,
    )
    count = len(sample.ids)
    return [form.make(tuple(_row(c, j) for c in columns)) for j in range(count)]


class SequenceHost(Protocol):
    """What :class:`TransitionSequence` uses of its :class:`~recollect.TransitionBuffer`."""

    @property
    def num_envs(self) -> int: ...

    @property
    def replay_buffer(self) -> Any: ...

    def __len__(self) -> int: ...

    def clock(self) -> int: ...

    def add(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        next_observation: Any,
        terminated: Any,
        truncated: Any = False,
    ) -> None: ...

    def sample_at(self, rows: Any, times: Any) -> TransitionSample: ...

    def item_at(self, row: int, time: int) -> tuple[Any, ...] | None: ...


class TransitionSequence:
    """The ``deque`` face of a :class:`~recollect.TransitionBuffer`: ``append`` and reads by
    position in insertion order (oldest first; with ``num_envs > 1`` by add, then env).

    Position ``i`` is the transition of env ``i % num_envs`` at step time
    ``oldest + i // num_envs``; it is read with ``buffer.sample_at``, which gathers
    the slots of the transitions asked for and nothing else.

    Attributes:
        form: the form of the first append (None: nothing appended; reads then give
            :class:`Transition`).
    """

    def __init__(self, buffer: SequenceHost) -> None:
        self.buffer = buffer
        self.form: ItemForm | None = None

    def append(self, transition: Any) -> None:
        """``buffer.add`` of a tuple of 4, 5 or 6 fields; see ``TransitionBuffer.append``."""
        form = form_of(transition)
        check_same_form(self.form, form)
        self.buffer.add(*add_args(transition))
        self.form = form

    def get(self, index: Any) -> Any:
        """``buffer[index]``: one item (int) or a list of them (slice)."""
        if isinstance(index, slice):
            if len(self.buffer) == 0:
                return []
            with self.buffer.replay_buffer.writer.lock:
                oldest, clock = self._span()
                positions = np.arange((clock - oldest) * self.buffer.num_envs)[index]
                return self._read(positions, oldest)
        try:
            i = operator.index(index)
        except TypeError:
            raise InvalidArgumentTypeError(
                f"TransitionBuffer indices must be ints or slices; got {type(index).__name__}."
            ) from None
        try:
            lock = self.buffer.replay_buffer.writer.lock
        except NotEnoughDataError:  # nothing added yet
            raise IndexError(f"TransitionBuffer index {i} out of range: it is empty.") from None
        with lock:
            oldest, clock = self._span()
            n = (clock - oldest) * self.buffer.num_envs
            if n == 0:
                raise IndexError(f"TransitionBuffer index {i} out of range: it is empty.")
            if not -n <= i < n:
                raise IndexError(
                    f"TransitionBuffer index {i} out of range: it holds {n} transitions."
                )
            pos, envs = i % n, self.buffer.num_envs
            values = self.buffer.item_at(pos % envs, oldest + pos // envs)  # no gather
            if values is not None:
                return (self.form or DEFAULT_FORM).make(values)
            return self._read(np.array([pos], np.int64), oldest)[0]

    def iterate(self) -> Iterator[tuple[Any, ...]]:
        """The items stored when called, oldest first, gathered ``ITER_CHUNK`` at a time.

        Raises:
            StateError: an item not yet reached was overwritten or cleared meanwhile.
        """
        if len(self.buffer) == 0:
            return
        lock, envs = self.buffer.replay_buffer.writer.lock, self.buffer.num_envs
        with lock:
            t, end = self._span()
        while t < end:
            stop = min(end, t + max(1, ITER_CHUNK // envs))
            with lock:
                oldest, _ = self._span()
                if oldest > t:
                    raise StateError(
                        f"the TransitionBuffer was overwritten or cleared while being iterated "
                        f"(the transitions of add {t} are gone); iterate list(buf) or add after "
                        "the loop."
                    )
                items = self._read(np.arange((stop - t) * envs) + (t - oldest) * envs, oldest)
            yield from items
            t = stop

    def _span(self) -> tuple[int, int]:
        """``(oldest, clock)``: step times of the oldest stored add and of the next add; the
        caller holds the buffer lock."""
        clock = self.buffer.clock()
        return clock - len(self.buffer) // self.buffer.num_envs, clock

    def _read(self, positions: np.ndarray, oldest: int) -> list[tuple[Any, ...]]:
        """Items at ``positions`` (in range) given the ``oldest`` add's step time."""
        if len(positions) == 0:
            return []
        envs = self.buffer.num_envs
        sample = self.buffer.sample_at(positions % envs, oldest + positions // envs)
        return items_of(sample, self.form or DEFAULT_FORM)


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(getattr(cls, "_fields", ()))


def _row(tree: Any, j: int) -> Any:
    if isinstance(tree, np.ndarray):
        return tree[j]
    return optree.tree_map(lambda x: x[j], tree, none_is_leaf=False)


#: what to call instead of the methods of other buffer classes (``OtherClassMethod``)
ADD_BATCH_INSTEAD = (
    "TransitionBuffer has no add_batch (a ReplayBuffer / TF-Agents method): use "
    "add(observation, action, reward, next_observation, terminated, truncated) per "
    "transition (with TransitionBuffer(num_envs=N) each argument takes a leading [N] env "
    "dim), or recollect.ReplayBuffer(spec, ...).add_batch for step nests."
)
GET_NEXT_INSTEAD = (
    "TransitionBuffer has no get_next (a TF-Agents ReplayBuffer method): use "
    "sample(batch_size), or recollect.tf_data.as_dataset(buffer, sample_batch_size=...) "
    "for a tf.data.Dataset; recollect.tf_agents.TFUniformReplayBuffer has get_next."
)
