"""ReplayBufferManager: create or restore a buffer, feed it, sample it, checkpoint it.

The API users know from Reverb-based projects (one object owns the buffer,
its observer, its dataset and its checkpoint directory), on top of
:class:`~recollect.ReplayBuffer` and :mod:`recollect.checkpoint`. It reads
its buffer, local or served, through the
:class:`~recollect.buffers.source.SampleSource` members they share. Imports no
framework.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from recollect.buffers.checkpoint import load_buffer, save_buffer
from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.collect.observers import Observer
from recollect.errors import CheckpointError, InvalidArgumentError, StateError
from recollect.manager.checks import (
    check_checkpoint_matches,
    check_episode_end,
    leaves_differ,
    reverb_checkpoint,
    trajectory_episode_end,
)
from recollect.manager.iterator import SampleIterator
from recollect.samplers.base import Sampler
from recollect.specs import FlatSpec
from recollect.state.atomic import find_checkpoint
from recollect.state.manifest import MANIFEST

if TYPE_CHECKING:  # the service loads only when a manager is given one
    from recollect.service import Client, TableHandle, Writer

__all__ = ["ReplayBufferManager", "SampleIterator"]


def _is_client(service: object) -> bool:
    """Whether ``service`` is a :class:`~recollect.service.Client` (without importing the
    service when it is not loaded yet: then nothing can be a Client)."""
    client = sys.modules.get("recollect.service.client")
    return client is not None and isinstance(service, client.Client)


class ReplayBufferManager:
    """Owns one replay buffer, its observer and its checkpoint directory.

    The usual training script resumes where it stopped:
    :meth:`create_or_load_replay_buffer` loads the checkpoint in
    ``checkpoint_dir`` when there is one and creates an empty buffer
    otherwise. :meth:`create_replay_buffer` refuses a directory that already
    holds a checkpoint (its next :meth:`checkpoint` would replace it) unless
    ``overwrite=True``.

    Args:
        data_spec: nest of :class:`~recollect.ArraySpec` describing one step;
            needed to create a buffer (optional for loading, where it is
            checked against the checkpoint).
        capacity: total steps stored over all env rows (needed to create a
            buffer; checked when loading).
        checkpoint_dir: the checkpoint directory :meth:`checkpoint` writes and
            :meth:`load_replay_buffer` reads.
        num_envs: env rows (parallel environments); observer steps have this
            leading dim. Default: 1 when creating, the checkpoint's when loading
            (a value given is checked against the checkpoint).
        sequence_length: default window length of samples (e.g. 2 for
            transitions); required by prioritized samplers. Checked against the
            checkpoint when loading.
        sampler: a :class:`~recollect.Sampler` (copied for every new buffer)
            or a zero-argument factory of one; default uniform. A loaded buffer
            keeps the checkpoint's sampler and its state; a sampler given here
            must be of the same class.
        rng: seed or generator for sampling (a loaded buffer continues the
            checkpoint's RNG state).
        service: a :class:`~recollect.service.Client`: the manager then backs
            onto the served table ``table`` instead of a local buffer, with the
            same methods: ``replay_buffer`` is the table's
            :class:`~recollect.service.TableHandle`, the observer writes through a
            :class:`~recollect.service.Writer` of ``num_envs`` rows, ``checkpoint``
            checkpoints the service to ``checkpoint_dir``, ``clear`` resets the
            table, and ``create_replay_buffer`` empties it. A service restores its
            tables from its own ``checkpoint_dir`` when it starts; loading attaches
            to the table as the service holds it.
        table: the served table's name (with ``service``).
        episode_end: the new buffer's ``episode_end`` (see :class:`~recollect.ReplayBuffer`).
            None: ``("step_type", 2)`` for a TF-Agents ``Trajectory`` spec (top-level
            integer ``step_type`` and ``next_step_type``, no ``is_last``): windows end on a
            boundary step and never cross one, as the items Reverb's
            ``ReverbAddTrajectoryObserver`` writes; else the buffer's default (a bool
            ``is_last`` leaf). False: windows may cross episodes (TF-Agents' uniform buffer).
            Checked against the checkpoint when loading, if given.

    Raises:
        InvalidArgumentError: from the methods, when an argument they need is
            missing or differs from the checkpoint's.
        CheckpointError: :meth:`create_replay_buffer` on a directory holding a
            checkpoint (without ``overwrite=True``); :meth:`load_replay_buffer`
            without a checkpoint or with a damaged one.
        StateError: a method other than ``close`` after :meth:`close`, or a
            buffer method before one was created or loaded.

    Example:
        >>> with ReplayBufferManager(data_spec=spec, capacity=50_000, num_envs=4,
        ...                          checkpoint_dir="ckpt/replay", sequence_length=2) as m:
        ...     buffer, observer = m.create_or_load_replay_buffer()
        ...     observer(batched_steps)  # leaves [num_envs, ...]
        ...     batch = next(m.get_dataset(batch_size=64, num_steps=2))
        ...     m.checkpoint()
    """

    def __init__(
        self,
        data_spec: Any = None,
        capacity: int | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        sequence_length: int | None = None,
        *,
        num_envs: int | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        rng: RngLike = None,
        service: Client | None = None,
        table: str = "replay",
        episode_end: str | tuple[str, Any] | bool | None = None,
    ) -> None:
        if service is not None and not _is_client(service):
            raise InvalidArgumentError(
                f"`service` must be a recollect.service.Client (server.client(), "
                f"recollect.ray.connect(name)); got {type(service).__name__}."
            )
        self._data_spec = data_spec
        self._capacity = capacity
        self._checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self._num_envs = num_envs
        self._sequence_length = sequence_length
        self._sampler = sampler
        self._rng = rng
        self._service = service
        self._table = table
        self._episode_end = episode_end
        self._buffer: ReplayBuffer | TableHandle | None = None
        self._local: ReplayBuffer | None = None  # the buffer, when it is not a served table
        self._writer: Writer | None = None
        self._observer: Observer | None = None
        self._closed = False

    # -- state ------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def checkpoint_dir(self) -> Path | None:
        """The checkpoint directory."""
        return self._checkpoint_dir

    @property
    def replay_buffer(self) -> ReplayBuffer | TableHandle:
        """The current buffer (the served table's handle when backed by a service).

        Raises:
            StateError: closed, or no buffer created or loaded yet.
        """
        self._check_open()
        if self._buffer is None:
            raise StateError(
                "no replay buffer yet; call manager.create_replay_buffer() or "
                "manager.load_replay_buffer() first."
            )
        return self._buffer

    @property
    def observer(self) -> Observer:
        """The current buffer's observer (see :class:`~recollect.observers.Observer`)."""
        self.replay_buffer  # noqa: B018 - raises when there is none
        assert self._observer is not None  # set together with the buffer
        return self._observer

    def _check_open(self) -> None:
        if self._closed:
            raise StateError("this ReplayBufferManager is closed; create a new one.")

    def _adopt(self, buffer: ReplayBuffer) -> tuple[ReplayBuffer, Observer]:
        if self._observer is not None:
            self._observer.close()
        self._buffer = self._local = buffer
        self._observer = Observer(buffer)
        return buffer, self._observer

    def _attach(self, reset: bool) -> tuple[TableHandle, Observer]:
        """Backs onto the served table (emptied first with ``reset``); one writer of
        ``num_envs`` rows feeds the observer."""
        assert self._service is not None
        handle = self._service.table(self._table)
        differ = None
        if self._data_spec is not None:
            differ = leaves_differ(self._data_spec, FlatSpec(handle.data_spec))
        if differ is not None:
            raise InvalidArgumentError(f"the served table {self._table!r} {differ}.")
        if reset:
            self._service.reset(self._table)
        if self._writer is not None:
            self._writer.close()
        if self._observer is not None:
            self._observer.close()
        self._writer = handle.writer(1 if self._num_envs is None else self._num_envs)
        self._buffer, self._local = handle, None
        self._observer = Observer(self._writer)
        return handle, self._observer

    def _new_sampler(self) -> Sampler | None:
        if self._sampler is None or isinstance(self._sampler, Sampler):
            return copy.deepcopy(self._sampler)
        return self._sampler()

    # -- buffers ----------------------------------------------------------
    def has_checkpoint(self) -> bool:
        """Whether ``checkpoint_dir`` holds a checkpoint (False without a ``checkpoint_dir``)."""
        if self._checkpoint_dir is None:
            return False
        if self._service is not None:
            from recollect.service.client import MANIFEST as SERVICE_MANIFEST

            return (self._checkpoint_dir / SERVICE_MANIFEST).is_file()
        root = find_checkpoint(self._checkpoint_dir)
        return root is not None and (root / MANIFEST).is_file()

    def _refuse_reverb_checkpoint(self) -> None:
        """Raises when ``checkpoint_dir`` holds checkpoints dm-reverb wrote (never read
        as an empty directory)."""
        if self._checkpoint_dir is None or self._service is not None:
            return
        found = reverb_checkpoint(self._checkpoint_dir)
        if found is not None:
            raise CheckpointError(
                f"{self._checkpoint_dir} holds a Reverb checkpoint ({found.name}, written by "
                "dm-reverb), not a recollect one. Restore it with recollect.reverb "
                "(reverb.Server(tables, checkpointer=reverb.platform.checkpointers_lib."
                "DefaultCheckpointer(path))), or convert it first with `recollect import --from "
                "reverb DIR --checkpoint-dir PARENT --buffer-name NAME` and point the manager "
                "at PARENT/NAME."
            )

    def create_replay_buffer(
        self, *, overwrite: bool = False
    ) -> tuple[ReplayBuffer | TableHandle, Observer]:
        """Creates a new, empty buffer (replacing the current one) and its observer.

        Args:
            overwrite: allow ``checkpoint_dir`` to hold a checkpoint already;
                the next :meth:`checkpoint` replaces it with the new buffer.

        Returns:
            ``(replay_buffer, observer)``.

        Raises:
            InvalidArgumentError: ``data_spec`` or ``capacity`` was not given.
            CheckpointError: ``checkpoint_dir`` holds a checkpoint and
                ``overwrite`` is False (use :meth:`create_or_load_replay_buffer`
                or :meth:`load_replay_buffer` to continue it).
        """
        self._check_open()
        if self._service is not None:
            if not overwrite and self.has_checkpoint():
                raise CheckpointError(
                    f"{self._checkpoint_dir} already holds a service checkpoint; emptying "
                    f"table {self._table!r} would lose what it restored. Call "
                    "create_or_load_replay_buffer() to continue, or "
                    "create_replay_buffer(overwrite=True) to start over."
                )
            return self._attach(reset=True)
        if self._data_spec is None or self._capacity is None:
            raise InvalidArgumentError(
                "create_replay_buffer needs data_spec and capacity; pass them to "
                "ReplayBufferManager(data_spec=..., capacity=...)."
            )
        if not overwrite:
            self._refuse_reverb_checkpoint()
        if not overwrite and self.has_checkpoint():
            raise CheckpointError(
                f"{self._checkpoint_dir} already holds a checkpoint; a new buffer "
                "would replace it at the next manager.checkpoint(). Call "
                "manager.create_or_load_replay_buffer() or manager.load_replay_buffer() to "
                "continue it, or create_replay_buffer(overwrite=True) to start over."
            )
        buffer = ReplayBuffer(
            self._data_spec,
            self._capacity,
            1 if self._num_envs is None else self._num_envs,
            rng=self._rng,
            sampler=self._new_sampler(),
            sequence_length=self._sequence_length,
            episode_end=(
                trajectory_episode_end(self._data_spec)
                if self._episode_end is None
                else self._episode_end
            ),
        )
        return self._adopt(buffer)

    def load_replay_buffer(
        self, *, mmap: bool = False
    ) -> tuple[ReplayBuffer | TableHandle, Observer]:
        """Restores the buffer from ``checkpoint_dir`` (data, counters, sampler and RNG state).

        Every argument given to the manager (``data_spec``, ``capacity``,
        ``num_envs``, ``sequence_length``, the sampler's class) must match the
        checkpoint; those not given are taken from it.

        Returns:
            ``(replay_buffer, observer)``.

        Raises:
            InvalidArgumentError: no ``checkpoint_dir``, or the checkpoint's
                spec, capacity, num_envs, sequence_length, sampler class or episode_end
                differs from the one given to the manager (the message names it).
            CheckpointError: no checkpoint there (call :meth:`create_replay_buffer`),
                or a damaged one (the message names the file).
        """
        self._check_open()
        directory = self._require_dir("load_replay_buffer")
        if self._service is not None:
            return self._attach(reset=False)
        self._refuse_reverb_checkpoint()
        if not self.has_checkpoint():
            raise CheckpointError(
                f"no checkpoint in {directory} (it is empty or missing); call "
                "manager.create_replay_buffer() to start a new buffer."
            )
        buffer = load_buffer(directory, mmap=mmap, kind="ReplayBuffer")
        given = {
            "capacity": self._capacity,
            "num_envs": self._num_envs,
            "sequence_length": self._sequence_length,
        }
        sampler = self._new_sampler()
        check_checkpoint_matches(buffer, directory, self._data_spec, given, sampler)
        check_episode_end(buffer, directory, self._episode_end)
        return self._adopt(buffer)

    def create_or_load_replay_buffer(
        self, *, mmap: bool = False
    ) -> tuple[ReplayBuffer | TableHandle, Observer]:
        """Loads the checkpoint in ``checkpoint_dir`` when there is one, else creates a buffer.

        The resume pattern of training scripts: run it again after a restart
        and it continues from the last :meth:`checkpoint`. A loaded buffer is
        checked as in :meth:`load_replay_buffer`.

        Returns:
            ``(replay_buffer, observer)``.

        Raises:
            InvalidArgumentError: see :meth:`create_replay_buffer` and
                :meth:`load_replay_buffer`.
            CheckpointError: a damaged checkpoint.
        """
        if self._service is not None:
            return self._attach(reset=False)
        self._refuse_reverb_checkpoint()
        if self.has_checkpoint():
            return self.load_replay_buffer(mmap=mmap)
        return self.create_replay_buffer()

    def get_replay_buffer_and_observer(self) -> tuple[ReplayBuffer | TableHandle, Observer]:
        """The current ``(replay_buffer, observer)``; the first call creates them, or
        loads ``checkpoint_dir``'s checkpoint (as :meth:`create_or_load_replay_buffer`;
        the seed's manager, whose Reverb server restores its checkpointer's latest
        checkpoint when it is created).

        Raises:
            As :meth:`create_or_load_replay_buffer`; StateError after :meth:`close`.
        """
        self._check_open()
        if self._buffer is None:
            return self.create_or_load_replay_buffer()
        return self.replay_buffer, self.observer

    def _require_dir(self, what: str) -> Path:
        if self._checkpoint_dir is None:
            raise InvalidArgumentError(
                f"{what} needs a checkpoint directory; pass "
                "ReplayBufferManager(checkpoint_dir=...)."
            )
        return self._checkpoint_dir

    # -- using the buffer -------------------------------------------------
    def get_dataset(
        self,
        batch_size: int = 64,
        num_steps: int | None = None,
        *,
        framework: Literal["auto", "tf", "numpy"] = "auto",
        **sample_options: Any,
    ) -> Any:
        """The learner's data: batches of ``batch_size`` windows of ``num_steps`` steps.

        Args:
            batch_size: windows per batch (the seed's default, 64).
            num_steps: window length; None: the manager's ``sequence_length``
                (the buffer's, when the manager was given none), else single steps.
            framework: ``"tf"``: a ``tf.data.Dataset`` of ``(items, BufferInfo)``
                (:func:`recollect.tf_data.as_dataset`), as the seed's manager
                returns; ``"numpy"``: an endless :class:`SampleIterator` of
                :class:`~recollect.Sample` (``next()`` samples the buffer as it is
                then, raises :class:`~recollect.errors.NotEnoughDataError` while no
                valid window is stored, stops once the manager is closed);
                ``"auto"``: ``"tf"`` when TensorFlow is installed, else ``"numpy"``.
            **sample_options: passed to ``sample`` (``"numpy"`` only, e.g.
                ``importance_sampling_exponent``).

        Raises:
            StateError: closed, or no buffer created or loaded yet.
            InvalidArgumentError: an unknown ``framework``, or ``sample_options``
                with a ``tf.data.Dataset``.
        """
        buffer = self.replay_buffer  # raises when there is none
        if num_steps is None:
            source = getattr(buffer, "reader", buffer)  # a ReplayBuffer's reader, or a handle
            num_steps = self._sequence_length or getattr(source, "sequence_length", None)
        if framework == "auto":
            framework = "tf" if importlib.util.find_spec("tensorflow") is not None else "numpy"
        if framework == "numpy":
            return SampleIterator(self, batch_size, num_steps, sample_options)
        if framework != "tf":
            raise InvalidArgumentError(
                f"get_dataset: framework must be 'auto', 'tf' or 'numpy'; got {framework!r}."
            )
        if sample_options:
            raise InvalidArgumentError(
                f"get_dataset: sample options {sorted(sample_options)} apply to the numpy "
                "iterator only; pass framework='numpy' with them."
            )
        from recollect.adapters.tf_data import as_dataset

        return as_dataset(buffer, sample_batch_size=batch_size, num_steps=num_steps)

    def num_frames(self) -> int:
        """Steps currently stored; 0 before a buffer was created or loaded, and after
        :meth:`close` (as the seed's manager)."""
        if self._buffer is None:
            return 0
        return self._buffer.num_frames()

    def checkpoint(self) -> Path:
        """Atomically writes the buffer (the whole service, when backed by one) to
        ``checkpoint_dir``; returns the path."""
        self.replay_buffer  # noqa: B018 - raises when there is none
        if self._local is not None:
            return save_buffer(self._local, self._require_dir("checkpoint"))
        assert self._writer is not None and self._service is not None
        self._writer.flush()
        return self._service.checkpoint(self._require_dir("checkpoint"))

    def clear(self) -> None:
        """Forgets every stored step (ids keep increasing); resets a served table."""
        self.replay_buffer.clear()

    def close(self) -> None:
        """Releases the buffer; idempotent. Does not checkpoint (call :meth:`checkpoint`)."""
        if self._closed:
            return
        self._closed = True
        if self._observer is not None:
            self._observer.close()
        if self._writer is not None:
            self._writer.close()  # flushes and releases the rows; the service runs on
        elif self._local is not None:  # a served table has a writer
            self._local.close()  # stops datasets/iterators reading from it
        self._buffer = self._local = self._observer = self._writer = None

    def __enter__(self) -> ReplayBufferManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else repr(self._buffer)
        return f"ReplayBufferManager(checkpoint_dir={str(self._checkpoint_dir)!r}, {state})"
