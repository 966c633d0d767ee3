"""Saving and restoring a :class:`~recollect.ReplayBuffer`: its :class:`BufferPersistence`
(``buffer.persistence``: configuration, state dict, checkpoint directory in format 1 and 2,
see :mod:`recollect.state.manifest`, memmap flushes), and building a buffer from a
configuration or a saved state (:func:`build_from_config`, :func:`restore_saved`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from recollect.buffers.buffer_part import BufferPart
from recollect.buffers.memmap_state import MemmapState
from recollect.buffers.saveable import check_saveable
from recollect.errors import CheckpointError, RecollectError
from recollect.samplers.base import Sampler, registered_sampler
from recollect.specs import FlatSpec
from recollect.state.files import Saved, write_checkpoint
from recollect.state.manifest import describe_spec, rebuild_spec
from recollect.storage.base import Storage
from recollect.storage.episode_ends import EpisodeEnd, resolve_episode_end
from recollect.storage.frames.frame_store import FrameStack
from recollect.table import Table
from recollect.table.rate_limiters import RateLimiter, rate_limiter_from_config

__all__ = [
    "KIND",
    "BufferPersistence",
    "buffer_config",
    "build_from_config",
    "frame_stacks_config",
    "json_safe",
    "restore_saved",
    "sampler_config",
]

#: the checkpoint kind of a ReplayBuffer (``Saved.kind``, the manifest's ``kind``)
KIND = "ReplayBuffer"
T = TypeVar("T")


def frame_stacks_config(frame_stacks: dict[str, Any] | None) -> dict[str, Any]:
    """JSON description of ``{leaf path: FrameStack}``."""
    return {path: stack.config() for path, stack in (frame_stacks or {}).items()}


def frame_stacks_from_config(config: dict[str, Any]) -> dict[str, FrameStack] | None:
    """Inverse of :func:`frame_stacks_config`."""
    stacks = {}
    for path, c in (config or {}).items():
        padding = c["padding"] if isinstance(c["padding"], str) else np.asarray(c["padding"])
        stacks[path] = FrameStack(**{**c, "padding": padding})
    return stacks or None


def buffer_config(
    flat: FlatSpec,
    table: Table,
    frame_stacks: dict[str, Any] | None,
    sampler: Sampler | None,
    rate_limiter: RateLimiter | None,
    codecs: dict[int, Any],
    track_times_sampled: bool,
    episode_end: str | list[Any] | bool | None = None,
) -> dict[str, Any]:
    """The JSON-able construction arguments of a :class:`~recollect.ReplayBuffer` over
    ``table`` (its ``config()``): spec, geometry, frame stacks, sampler, rate limiter,
    compression codecs (``{leaf index: codec}``), ``track_times_sampled`` as asked, and
    ``episode_end`` when one was given
    (:func:`~recollect.storage.episode_ends.episode_end_config`)."""
    config: dict[str, Any] = {
        "spec": describe_spec(flat.spec),
        "capacity": table.num_envs * table.max_length,
        "num_envs": table.num_envs,
        "frame_stacks": frame_stacks_config(frame_stacks),
        "sequence_length": table.sequence_length,
        "sampler": {"type": table.sampler.name, "config": sampler_config(sampler)},
        "shard": table.shard,
        "track_times_sampled": bool(track_times_sampled),
    }
    if rate_limiter is not None:
        config["rate_limiter"] = {
            "type": rate_limiter.name,
            "config": json_safe(rate_limiter.get_config()),
        }
    if table.max_times_sampled:
        config["max_times_sampled"] = table.max_times_sampled
    if codecs:
        config["compression"] = {flat.paths[i]: c.config() for i, c in codecs.items()}
    if episode_end is not None:
        config["episode_end"] = episode_end
    return config


class BufferPersistence(BufferPart):
    """Configuration, state dict, checkpoints and memmap flushes of a
    :class:`~recollect.ReplayBuffer` over its table and storage (``buffer.persistence``).

    Args:
        flat: the buffer's flattened spec.
        table: the buffer's table.
        storage: the buffer's storage.
        config: the buffer's JSON-able construction arguments.
        persist: the memmap directory's state (reopened, flushed), or None (RAM storage).
        build: the buffer class, which :meth:`from_saved` builds.
        episode_end: the buffer's ``episode_end`` option or its resolved
            :class:`~recollect.storage.episode_ends.EpisodeEnd` (None: the spec's bool
            ``is_last``, if any): a format-1 state's episode ends are rebuilt from it.
    """

    def __init__(
        self,
        flat: FlatSpec,
        table: Table,
        storage: Storage,
        config: dict[str, Any],
        persist: MemmapState | None = None,
        build: Callable[..., Any] | None = None,
        *,
        episode_end: EpisodeEnd | str | tuple[str, Any] | bool | None = None,
    ) -> None:
        super().__init__(flat, table, storage)
        self._config = config
        self._persist = persist
        self._build = build
        self._end = resolve_episode_end(flat, episode_end)

    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (spec, geometry, sampler, frame stacks)."""
        return dict(self._config)

    def state_dict(self) -> dict[str, Any]:
        """``{"storage": ..., "table": ...}``: every array and value that restores the buffer.

        Storage arrays are the live arrays (no copies); hold ``table.lock`` while
        reading them if writers may run.
        """
        with self._table.lock:
            return {"storage": self._storage.state_dict(), "table": self._table.state_dict()}

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output of a buffer with the same :meth:`config`.

        Args:
            state: the state tree (arrays, or column sources of a checkpoint).
            allow_map: full saved ring columns may be memory-mapped copy-on-write.

        Raises:
            CheckpointError: the state does not fit this buffer.
        """
        with self._table.lock:
            table = state["table"]
            index = table["index"]
            rebuild = "end_rows" not in index  # format 1: ends rebuilt from is_last below
            layout = state.get("layout")
            t = np.asarray(index["t"], np.int64)
            t_clear = np.asarray(index["t_clear"], np.int64)
            lo = np.maximum(t_clear, t - self._max_length)
            if layout is not None and dict(layout) != _layout(lo, t, self._max_length):
                raise CheckpointError(
                    f"clocks t={t.tolist()}, t_clear={t_clear.tolist()} do not match "
                    f"stored_steps={layout.get('stored_steps')}, "
                    f"slot_offset={layout.get('slot_offset')}."
                )
            self._table.load_state_dict(table)
            self._storage.load_state_dict(state["storage"], allow_map=allow_map)
            self._storage.check_stored(lo, t)
            if rebuild and self._end is not None:
                self._rebuild_episode_ends(self._end)

    def _rebuild_episode_ends(self, end: EpisodeEnd) -> None:
        """Episode ends from the stored episode-end leaf (format-1 checkpoints)."""
        index = self._table.index
        counts = index.stored
        rows = np.repeat(np.arange(self._num_envs), counts)
        times = np.repeat(index.lo, counts) + (
            np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        )
        (leaf,) = self._storage.gather(
            rows, times % self._max_length, times=times, leaf_ids=[end.index]
        )
        flag = end.flags(leaf)
        index.set_ends(rows[flag], times[flag])

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :mod:`recollect.state.manifest`).

        Only the stored columns of the ring arrays are written when every row
        shares one stored range; otherwise whole rings. Writers are blocked
        while the buffer is saved.

        Returns:
            The absolute checkpoint path.

        Raises:
            CheckpointError: ``path`` is a non-empty directory that is not a checkpoint, or
                the checkpoint could not be loaded (see :meth:`check_saveable`).
            OSError: the disk is full or not writable (the old checkpoint stays).
        """
        self.check_saveable()
        with self._table.lock:
            return write_checkpoint(
                path, KIND, self.config(), self.state_dict(), self.stored_layout()
            )

    def check_saveable(self) -> None:
        """Raises :class:`CheckpointError` when a checkpoint of this buffer could not be loaded
        (a structured-dtype leaf, a sampler that its registered name does not rebuild)."""
        check_saveable(self._flat, self._table.sampler, self._config["sampler"]["config"])

    def stored_layout(self) -> dict[str, int]:
        """``{"slot_offset", "stored_steps"}``: the ring columns a checkpoint writes."""
        index = self._table.index
        return _layout(index.lo, index.hi, self._max_length)

    @property
    def recovered_steps_dropped(self) -> int:
        """Steps a ``recover=True`` reopen dropped (0 when nothing was recovered)."""
        return 0 if self._persist is None else self._persist.steps_dropped

    def flush(self) -> None:
        """Memmap storage: writes data, clocks and sampler state to ``directory`` (else no-op)."""
        if self._persist is not None:
            self._persist.flush(self._storage, self._table, self._table.lock)

    def from_saved(self, saved: Saved, *, mmap: bool = False) -> Any:
        """A new buffer of this buffer's class rebuilt from a state directory
        (:func:`restore_saved`).

        Raises:
            CheckpointError: another kind, a malformed configuration or state.
        """
        if self._build is None:
            raise CheckpointError("this persistence was built without a buffer class to restore.")
        return restore_saved(self._build, saved, mmap=mmap)


def build_from_config(cls: Callable[..., T], config: dict[str, Any], **kwargs: Any) -> T:
    """An empty buffer ``cls(...)`` built from ``config()`` output (``kwargs`` override
    arguments).

    Raises:
        CheckpointError: the configuration is malformed or names an unknown sampler.
    """
    try:
        sampler_cls = registered_sampler(config["sampler"]["type"])
        sampler = sampler_cls(**config["sampler"]["config"])
        buffer = cls(
            rebuild_spec(config["spec"]),
            config["capacity"],
            config["num_envs"],
            sampler=sampler,
            sequence_length=config.get("sequence_length"),
            frame_stacks=frame_stacks_from_config(config.get("frame_stacks") or {}),
            shard=config.get("shard", 0),
            track_times_sampled=config.get("track_times_sampled", False),
            **{
                "rate_limiter": rate_limiter_from_config(config.get("rate_limiter")),
                "max_times_sampled": config.get("max_times_sampled", 0),
                "compression": config.get("compression"),
                "episode_end": config.get("episode_end"),  # (path, value) as a 2-list
                **kwargs,
            },
        )
    except (CheckpointError, MemoryError):
        raise
    except (RecollectError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"inconsistent buffer description ({err}); the manifest's config was edited or "
            "damaged. Restore it from a backup."
        ) from err
    return buffer


def restore_saved(cls: Callable[..., T], saved: Saved, *, mmap: bool = False) -> T:
    """Rebuilds a buffer ``cls(...)`` (a :class:`~recollect.ReplayBuffer` class) from a state
    directory (:func:`recollect.state.files.read_state`).

    Raises:
        CheckpointError: another kind, a malformed configuration or state.
    """
    if saved.kind != KIND:
        raise CheckpointError(
            f"{saved.where}: holds a {saved.kind}, not a {KIND}; load it with "
            f"recollect.{saved.kind}.load."
        )
    state = saved.state
    if "layout" not in state and saved.manifest.get("layout") is not None:
        state = {**state, "layout": saved.manifest["layout"]}
    return _restore(cls, saved.config, state, saved.where, mmap)


def _layout(lo: np.ndarray, hi: np.ndarray, max_length: int) -> dict[str, int]:
    """Stored columns only when every row stores the same range of a partial ring; else all."""
    count = int(hi[0] - lo[0])
    if count < max_length and ((hi - lo) == count).all() and (lo == lo[0]).all():
        return {"slot_offset": int(lo[0]) % max_length, "stored_steps": count}
    return {"slot_offset": 0, "stored_steps": max_length}


def _restore(cls: Callable[..., T], config: Any, state: Any, where: str, mmap: bool) -> T:
    try:
        buffer: Any = build_from_config(cls, config, force=mmap)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from err
    try:
        buffer.load_state_dict(state, allow_map=mmap)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from err
    except (KeyError, TypeError, ValueError, RecollectError) as err:
        raise CheckpointError(
            f"{where}: cannot restore the buffer state ({err}); the checkpoint is damaged or "
            "was edited. Restore it from a backup or save the buffer again."
        ) from err
    return buffer


def sampler_config(sampler: Sampler | None) -> dict[str, Any]:
    if sampler is None:
        return {}
    try:
        return json_safe(sampler.get_config())
    except RecollectError:
        return {}


def json_safe(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with numpy scalars as Python numbers (JSON-able)."""
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in config.items()}
