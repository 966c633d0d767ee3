"""Saving and restoring a :class:`~recollect.TransitionBuffer`: the inner
:class:`~recollect.ReplayBuffer`'s state plus the observation chains."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.buffers.transition_items import ItemForm, TransitionSequence
from recollect.errors import CheckpointError
from recollect.samplers.prioritized import Prioritized
from recollect.state.files import Saved, load_consistent, write_checkpoint
from recollect.state.rng import decode_rng, encode_rng
from recollect.storage.codecs import json_compression
from recollect.storage.frame_store import FrameStack

if TYPE_CHECKING:
    from recollect.buffers.final_observations import FinalObservations
    from recollect.specs import FlatSpec

__all__ = ["TransitionState"]


class TransitionState:
    """Configuration, state dict and checkpoints of :class:`~recollect.TransitionBuffer`
    (a mixin)."""

    kind: ClassVar[str] = "TransitionBuffer"
    _capacity: int
    _num_envs: int
    _rng: RngLike
    _buffer: ReplayBuffer | None
    _prioritized: Prioritized | None
    _frame_stack: FrameStack | None
    _compression: dict[str, Any] | None
    _sequence: TransitionSequence
    _obs_flat: FlatSpec
    _pending: list[np.ndarray]
    _has_pending: np.ndarray
    _final_ref: np.ndarray
    _finals: FinalObservations

    def _attach(self, buffer: ReplayBuffer, obs_spec: Any) -> None:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (and the inner buffer's, once built)."""
        prioritized, stack = self._prioritized, self._frame_stack
        return {
            "capacity": self._capacity,
            "num_envs": self._num_envs,
            "prioritized": None if prioritized is None else prioritized.get_config(),
            "frame_stack": None if stack is None else stack.config(),
            **({"compression": json_compression(self._compression)} if self._compression else {}),
            "replay": None if self._buffer is None else self._buffer.config(),
            **({} if (form := self._sequence.form) is None else {"item_form": form.config()}),
        }

    def state_dict(self) -> dict[str, Any]:
        """The inner buffer's state plus the observation chains (``final_ref`` ring columns,
        pending next observations, the live final observations)."""
        if self._buffer is None:
            rng = self._rng
            generator = rng if isinstance(rng, np.random.Generator) else None
            if generator is None and rng is not None:
                generator = np.random.default_rng(rng)
            return {"rng": None if generator is None else encode_rng(generator)}
        finals = self._finals
        pos = np.arange(finals.start, finals.n) % max(finals.size, 1)
        live = finals.size > 0
        return {
            "replay": self._buffer.state_dict(),
            "chain": {
                "columns": {"final_ref": self._final_ref[:, :, None]},
                "pending": {f"{i:03d}": p for i, p in enumerate(self._pending)},
                "has_pending": self._has_pending,
                "finals": {
                    "arrays": {
                        f"{i:03d}": a[pos] if live else a for i, a in enumerate(finals.arrays)
                    },
                    "times": finals.times[pos] if live else finals.times,
                    "size": finals.size,
                    "start": finals.start,
                    "n": finals.n,
                },
            },
        }

    def restore(self, buffer: ReplayBuffer, chain: dict[str, Any]) -> None:
        """Adopts a restored inner ``buffer`` and the saved observation ``chain`` state
        (``state_dict()["chain"]``); used when loading a checkpoint.

        Raises:
            CheckpointError: the chain state does not match the buffer's spec.
        """
        if isinstance(buffer.sampler, Prioritized):
            self._prioritized = buffer.sampler
        self._attach(buffer, buffer.data_spec["observation"])
        ref = np.full((self._num_envs, buffer.max_length, 1), -1, np.int64)
        source = chain["columns"]["final_ref"]
        if hasattr(source, "read_into"):
            source.read_into(ref)
        else:
            ref[...] = source
        self._final_ref = ref[:, :, 0].copy()
        pending = [np.asarray(chain["pending"][k]) for k in sorted(chain["pending"])]
        has_pending = np.asarray(chain["has_pending"])
        f = chain["finals"]
        size, start, n = int(f["size"]), int(f["start"]), int(f["n"])
        entries = [np.asarray(f["arrays"][k]) for k in sorted(f["arrays"])]
        times = np.asarray(f["times"], np.int64)
        flat = self._obs_flat
        expect = [((self._num_envs, *s), d) for s, d in zip(flat.shapes, flat.dtypes, strict=True)]
        live = n - start if size else 0
        got = [(p.shape, p.dtype) for p in pending]
        if got != expect or has_pending.shape != (self._num_envs,) or len(times) != live:
            raise CheckpointError("TransitionBuffer state does not match its spec.")
        self._pending, self._has_pending = pending, has_pending.astype(bool)
        finals = self._finals
        finals.size, finals.start, finals.n = size, start, n
        pos = np.arange(start, n) % max(size, 1)
        finals.arrays = []
        for entry, shape, dtype in zip(entries, flat.shapes, flat.dtypes, strict=True):
            array = np.zeros((size, *shape), dtype)
            if size:
                array[pos] = entry
            finals.arrays.append(array)
        finals.times = np.zeros(size, np.int64)
        if size:
            finals.times[pos] = times

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :meth:`ReplayBuffer.save`).

        Returns:
            The absolute checkpoint path.
        """
        if self._buffer is None:
            return write_checkpoint(path, self.kind, self.config(), self.state_dict())
        self._buffer.check_saveable()
        with self._buffer.lock:
            layout = self._buffer.stored_layout()
            return write_checkpoint(path, self.kind, self.config(), self.state_dict(), layout)

    @classmethod
    def from_saved(cls, saved: Saved, *, mmap: bool = False) -> Self:
        """Rebuilds a TransitionBuffer from a state directory.

        Raises:
            CheckpointError: another kind, or a malformed configuration or state.
        """
        where = saved.where
        if saved.kind != cls.kind:
            raise CheckpointError(
                f"{where}: holds a {saved.kind}, not a {cls.kind}; load it with "
                f"recollect.{saved.kind}.load."
            )
        config, state = saved.config, saved.state
        try:
            prioritized = config.get("prioritized")
            stack = config.get("frame_stack")
            if stack is not None:
                padding = stack["padding"]
                padding = padding if isinstance(padding, str) else np.asarray(padding)
                stack = FrameStack(**{**stack, "padding": padding})
            build: Any = cls  # a TransitionBuffer (this mixin has no constructor)
            tb: Self = build(
                config["capacity"],
                config["num_envs"],
                decode_rng(state.get("rng"), where) if config.get("replay") is None else None,
                prioritized=False if prioritized is None else Prioritized(**prioritized),
                frame_stack=stack,
                compression=config.get("compression"),
            )
            form = config.get("item_form")
            tb._sequence.form = None if form is None else ItemForm.from_config(form)
        except (TypeError, ValueError, KeyError) as err:
            raise CheckpointError(f"{where}: invalid TransitionBuffer options: {err}") from err
        if config.get("replay") is None:
            return tb
        buffer = ReplayBuffer.from_saved(
            Saved("ReplayBuffer", config["replay"], state["replay"], saved.manifest, where),
            mmap=mmap,
        )
        spec = buffer.data_spec
        if not isinstance(spec, dict) or "observation" not in spec:
            raise CheckpointError(f"{where}: a TransitionBuffer spec needs an 'observation' entry.")
        try:
            tb.restore(buffer, state["chain"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: bad TransitionBuffer state ({err}).") from err
        except CheckpointError as err:
            raise CheckpointError(f"{where}: {err}") from err
        return tb

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = False) -> Self:
        """Restores a TransitionBuffer written by :meth:`save` (format 1 and 2).

        Raises:
            CheckpointError: missing or damaged files, a newer format version,
                or a checkpoint of another kind.
        """
        return load_consistent(path, lambda saved: cls.from_saved(saved, mmap=mmap))
