"""TF-Agents' Reverb observers (``tf_agents.replay_buffers.reverb_utils``) on
:mod:`recollect.reverb`: switching ``from tf_agents.replay_buffers import reverb_utils``
to ``from recollect.tf_agents import reverb_utils`` and ``import reverb`` to
``import recollect.reverb as reverb`` is the whole change.

Each observer is fed one unbatched TF-Agents ``Trajectory`` step per environment step
(a driver's observer) and writes items through one
:class:`~recollect.reverb.TrajectoryWriter` of the client it was given (a
``recollect.reverb.Client``, or any client with Reverb's ``trajectory_writer``):

- :class:`ReverbAddTrajectoryObserver`: an item of the last ``sequence_length``
  steps every ``stride_length`` steps; at an episode's boundary step the steps are
  dropped (or padded with boundary steps of zeros, ``pad_end_of_episodes``), so no
  item spans two episodes.
- :class:`ReverbTrajectorySequenceObserver`: the same without cutting at boundaries.
- :class:`ReverbAddEpisodeObserver`: one item per episode, boundary step included.

TF-Agents 0.19's behaviour (its ``reverb_utils.py`` and ``reverb_utils_test.py``) is
the specification. A step is a boundary step when its ``step_type`` is LAST (2), as
TF-Agents' ``Trajectory.is_boundary()``; any nest with a top-level ``step_type``
works, TF-Agents' ``Trajectory`` or not, and TensorFlow is not needed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import optree

__all__ = [
    "ReverbAddEpisodeObserver",
    "ReverbAddTrajectoryObserver",
    "ReverbTrajectorySequenceObserver",
]

logger = logging.getLogger(__name__)

#: TF-Agents' ``StepType`` values
FIRST, MID, LAST = 0, 1, 2


def _field(step: Any, name: str) -> Any:
    if isinstance(step, dict):
        return step.get(name)
    return getattr(step, name, None)


def is_boundary(step: Any) -> bool:
    """Whether ``step`` is a boundary step (``step_type`` LAST): TF-Agents'
    ``Trajectory.is_boundary()`` for any nest with a top-level ``step_type``.

    Raises:
        ValueError: ``step`` has no ``step_type`` or it is not a scalar (the observers
            take unbatched steps).
    """
    method = getattr(step, "is_boundary", None)
    step_type = _field(step, "step_type")
    if step_type is None:
        if callable(method):
            return bool(np.asarray(method()))
        raise ValueError(
            "reverb observers take TF-Agents Trajectory steps: expected a nest with a "
            f"top-level 'step_type'; got a {type(step).__name__} without one."
        )
    value = np.asarray(step_type)
    if value.size != 1:
        raise ValueError(
            "reverb observers take one unbatched step per call (TF-Agents: 'does not "
            f"support batched trajectories'); got step_type of shape {value.shape}. Use a "
            "py driver with one environment, or unbatch the trajectory first."
        )
    return bool(value.reshape(()) == LAST)


def _table_names(table_name: str | Sequence[str]) -> list[str]:
    return [table_name] if isinstance(table_name, str) else list(table_name)


def _last(history: Any, length: int | None) -> Any:
    """The trajectory of the last ``length`` steps of every column (None: all)."""
    if length is None:
        return optree.tree_map(lambda column: column[:], history, none_is_leaf=False)
    return optree.tree_map(lambda column: column[-length:], history, none_is_leaf=False)


def padding_step(example: Any) -> Any:
    """A boundary step of zeros shaped like ``example`` (TF-Agents' ``boundary`` of
    zeros: ``step_type`` LAST, ``next_step_type`` FIRST)."""
    zeros: Any = optree.tree_map(
        lambda v: np.zeros_like(np.asarray(v)), example, none_is_leaf=False
    )
    types = {"step_type": LAST, "next_step_type": FIRST}
    if isinstance(zeros, dict):
        zeros.update(
            {k: np.asarray(v, np.asarray(example[k]).dtype) for k, v in types.items() if k in zeros}
        )
        return zeros
    present = {
        k: np.asarray(v, np.asarray(_field(example, k)).dtype)
        for k, v in types.items()
        if _field(example, k) is not None
    }
    return zeros._replace(**present)


class _WriterObserver:
    """What TF-Agents' Reverb observers share: a client, table names, the items' priority
    and one writer keeping ``num_keep_alive_refs`` steps (opened, ended per episode and
    closed alike)."""

    def __init__(
        self,
        py_client: Any,
        table_name: str | Sequence[str],
        priority: float | int,
        num_keep_alive_refs: int,
    ) -> None:
        self._py_client = py_client
        self._table_names = _table_names(table_name)
        self._priority = priority
        self._num_keep_alive_refs = num_keep_alive_refs
        self._writer: Any = None
        self._cached_steps = 0

    @property
    def py_client(self) -> Any:
        """The client the observer writes through."""
        return self._py_client

    def get_table_signature(self) -> Any:
        """The signature of the first table (every table of one observer shares it)."""
        return self._py_client.server_info()[self._table_names[0]].signature

    def _get_writer(self) -> Any:
        if self._writer is None:
            raise ValueError("Could not obtain writer from py_client.")
        return self._writer

    def flush(self) -> None:
        """Sends every item created so far to the server."""
        self._get_writer().flush()

    def _create_items(self, trajectory: Any) -> None:
        """One item of ``trajectory`` (columns of the writer's history) per table, with
        the observer's priority."""
        for table in self._table_names:
            self._writer.create_item(table=table, trajectory=trajectory, priority=self._priority)

    def open(self) -> None:
        """Opens the writer (no-op when open)."""
        if self._writer is None:
            self._writer = self._py_client.trajectory_writer(
                num_keep_alive_refs=self._num_keep_alive_refs, validate_items=False
            )
            self._cached_steps = 0

    def _next_episode(self) -> None:
        """Ends the writer's episode (opens the writer again after :meth:`close`)."""
        if self._writer is None:
            self.open()
        else:
            self._writer.end_episode()

    def close(self) -> None:
        """Ends the episode and closes the writer (sending what it holds)."""
        if self._writer is not None:
            self._writer.end_episode()
            self._writer.close()
            self._writer = None


class ReverbAddTrajectoryObserver(_WriterObserver):
    """Writes fixed-length windows of steps to Reverb tables (TF-Agents' class of the
    same name).

    After ``sequence_length`` steps of an episode, each ``stride_length``-th step
    creates an item of the last ``sequence_length`` steps in every table of
    ``table_name``, with ``priority``. At a boundary step the episode's steps are
    dropped, or, with ``pad_end_of_episodes``, padded with zero boundary steps so the
    last steps are written too (with ``tile_end_of_episodes``, one item per padding
    step: ``F M L P``, ``M L P P``, ``L P P P``).

    Args:
        py_client: a :class:`recollect.reverb.Client`.
        table_name: a table name or a sequence of them (data is written once).
        sequence_length: steps per item, >= 1.
        stride_length: steps between the starts of consecutive items, >= 1.
        priority: the items' priority.
        pad_end_of_episodes: pad the last window of an episode with boundary steps.
        tile_end_of_episodes: with padding, one item per padding step.

    Raises:
        ValueError: ``tile_end_of_episodes`` without ``pad_end_of_episodes`` (as
            TF-Agents); ``reset(write_cached_steps=True)`` without padding and too
            few steps cached for one item.
    """

    def __init__(
        self,
        py_client: Any,
        table_name: str | Sequence[str],
        sequence_length: int,
        stride_length: int = 1,
        priority: float | int = 1,
        pad_end_of_episodes: bool = False,
        tile_end_of_episodes: bool = False,
    ) -> None:
        if tile_end_of_episodes and not pad_end_of_episodes:
            raise ValueError(
                "Must set `pad_end_of_episodes=True` when using `tile_end_of_episodes`"
            )
        super().__init__(py_client, table_name, priority, sequence_length + 1)
        self._sequence_length = sequence_length
        self._stride_length = stride_length
        self._pad_end_of_episodes = pad_end_of_episodes
        self._tile_end_of_episodes = tile_end_of_episodes
        self._last_trajectory: Any = None
        self.open()

    def __call__(self, trajectory: Any) -> None:
        """Appends one unbatched step; creates the items it completes."""
        boundary = is_boundary(trajectory)  # checks the step first
        self._append(trajectory)
        if boundary:
            self.reset(write_cached_steps=self._pad_end_of_episodes)

    def _append(self, trajectory: Any) -> None:
        self._last_trajectory = trajectory
        self._writer.append(trajectory)
        self._cached_steps += 1
        self._write_cached_steps()

    def _sequence_lengths_reached(self) -> bool:
        over = self._cached_steps - self._sequence_length
        return over >= 0 and over % self._stride_length == 0

    def _write_cached_steps(self) -> None:
        if not self._sequence_lengths_reached():
            return
        self._create_items(_last(self._writer.history, self._sequence_length))

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode: with ``write_cached_steps``, pads (``pad_end_of_episodes``)
        or writes the cached steps first; then the cache is cleared.

        Raises:
            ValueError: ``write_cached_steps`` without padding and fewer than
                ``sequence_length`` steps cached since the last item.
        """
        if write_cached_steps and self._last_trajectory is not None:
            if self._pad_end_of_episodes:
                zero = padding_step(self._last_trajectory)
                count = (
                    self._sequence_length - 1
                    if self._tile_end_of_episodes
                    else self._sequence_length - self._cached_steps
                )
                for _ in range(count):
                    self._append(zero)
            elif self._sequence_lengths_reached():
                self._write_cached_steps()
            else:
                raise ValueError(
                    "write_cached_steps is True, but not enough steps remain in the cache to "
                    f"write an item with sequence_length={self._sequence_length}, consider "
                    "enabling pad_end_of_episodes."
                )
        self._cached_steps = 0
        self._last_trajectory = None
        self._next_episode()


class ReverbTrajectorySequenceObserver(ReverbAddTrajectoryObserver):
    """:class:`ReverbAddTrajectoryObserver` that does not cut at boundary steps: items
    may hold a boundary anywhere (TF-Agents' class of the same name)."""

    def __call__(self, trajectory: Any) -> None:
        is_boundary(trajectory)  # checks the step is one unbatched Trajectory step
        self._append(trajectory)


class ReverbAddEpisodeObserver(_WriterObserver):
    """Writes each whole episode, boundary step included, as one item (TF-Agents'
    class of the same name).

    Args:
        py_client: a :class:`recollect.reverb.Client`.
        table_name: a table name or a sequence of them.
        max_sequence_length: the most steps one episode may hold, >= 1.
        priority: the items' priority (see :meth:`update_priority`).
        bypass_partial_episodes: an episode longer than ``max_sequence_length`` is
            dropped with a logged error instead of raising.

    Raises:
        ValueError: ``max_sequence_length`` < 1; on call, an episode longer than
            ``max_sequence_length`` without ``bypass_partial_episodes``.
    """

    def __init__(
        self,
        py_client: Any,
        table_name: str | Sequence[str],
        max_sequence_length: int,
        priority: float | int = 1,
        bypass_partial_episodes: bool = False,
    ) -> None:
        if max_sequence_length <= 0:
            raise ValueError("`max_sequence_length` must be an integer greater equal one.")
        super().__init__(py_client, table_name, priority, max_sequence_length + 1)
        self._max_sequence_length = max_sequence_length
        self._bypass_partial_episodes = bypass_partial_episodes
        self._overflow_episode = False
        self._writer_has_data = False
        self.open()

    def update_priority(self, priority: float | int) -> None:
        """The priority of the next items."""
        self._priority = priority

    def __call__(self, trajectory: Any) -> None:
        """Caches one unbatched step; writes the episode at its boundary step."""
        if self._cached_steps >= self._max_sequence_length and not self._overflow_episode:
            self._overflow_episode = True
            if not self._bypass_partial_episodes:
                raise ValueError(
                    "The number of trajectories within the same episode exceeds "
                    "`max_sequence_length`. Consider increasing the `max_sequence_length` "
                    "or set `bypass_partial_episodes` to true to bypass the episodes with "
                    "length more than `max_sequence_length`."
                )
            logger.error(
                "The number of trajectories within the same episode exceeds "
                "`max_sequence_length`. This episode is bypassed and will NOT be written "
                "into the replay buffer. Consider increasing the `max_sequence_length`."
            )
        boundary = is_boundary(trajectory)
        if self._overflow_episode:
            if boundary:
                self.reset(write_cached_steps=False)
            return
        self._writer.append(trajectory)
        self._writer_has_data = True
        self._cached_steps += 1
        if boundary:
            self.reset(write_cached_steps=True)

    def _write_cached_steps(self) -> None:
        if not self._writer_has_data:
            logger.info("Skipped writing to Reverb because the writer is empty.")
            return
        self._create_items(_last(self._writer.history, None))
        self._writer_has_data = False

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode, writing the cached steps as one item first when
        ``write_cached_steps`` (else dropping them)."""
        if write_cached_steps:
            self._write_cached_steps()
        self._cached_steps = 0
        self._overflow_episode = False
        self._writer_has_data = False
        self._next_episode()

    def close(self) -> None:
        """Ends the episode and closes the writer."""
        super().close()
        self._writer_has_data = False
