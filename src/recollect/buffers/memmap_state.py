"""The state of a memmap buffer's directory: reopened on construction, flushed on demand.

The directory holds the live ``.npy`` leaf files (mapped by
:class:`~recollect.storage.memmap.MemmapStorage`) and a format-2 manifest
(:mod:`recollect.state.manifest`) with the buffer's configuration and the
table's state (clocks, episode ends, sampler state), written by
:meth:`MemmapState.flush` with the manifest replaced atomically. The first
write after a flush creates a ``dirty`` marker; reopening a dirty directory
raises :class:`~recollect.errors.CheckpointError` rather than restoring clocks
that no longer match the data, unless ``recover=True``.

Crash recovery: ``written.npy`` (int64 ``[num_envs]``, memory-mapped) holds
each row's clock one past the newest step whose write began; it is updated
before every write. ``recover=True`` restores the last flushed table state and
drops what no longer matches it: the steps written after that flush, and the
flushed steps whose ring slots those writes reused. A process crash (SIGKILL,
OOM kill) leaves the mapped pages in the page cache, so this restores a
consistent buffer; after a power loss or kernel crash the data pages written
since the last flush may be torn, which no reopen can detect.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import warnings
import weakref
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.samplers.windows import WindowIndex
from recollect.state.files import read_state, write_in_place
from recollect.state.manifest import FORMAT_VERSION, MANIFEST, spec_difference
from recollect.state.npyio import map_npy
from recollect.state.safe_files import create_new, read_regular
from recollect.state.space import create_npy_memmap
from recollect.storage.compressed_memmap import live_state

__all__ = ["MemmapState"]

DIRTY = "dirty"
WRITTEN = "written.npy"


class MemmapState:
    """Manifest and table state of one memmap directory.

    Args:
        directory: the buffer's directory (created if missing).
        config: the buffer's configuration; a reopen must match it exactly
            (spec, geometry, frame stacks, sequence length, sampler).
        recover: reopen a dirty directory at its last flushed state
            (:attr:`steps_dropped` counts what was lost) instead of refusing it.

    Raises:
        CheckpointError: the directory's manifest is unreadable, of another
            ``format_version``, dirty, or describes another buffer.
    """

    def __init__(self, directory: Any, config: dict[str, Any], recover: bool = False) -> None:
        self.directory = pathlib.Path(directory)
        self._created_dir = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._before = {p.name for p in self.directory.iterdir()}
        self.config = json.loads(json.dumps(config))  # JSON-normal form, comparable
        self.manifest_path = self.directory / MANIFEST
        self.recover = bool(recover)
        self.dirty = (self.directory / DIRTY).exists()
        self.saved = self._read() if self.manifest_path.exists() else None
        self.clean = False
        self.steps_dropped = 0
        self.written: np.ndarray | None = None

    @property
    def reopen(self) -> bool:
        """Whether the directory already holds this buffer."""
        return self.saved is not None

    def _read(self) -> Any:
        try:
            manifest = json.loads(read_regular(self.manifest_path))
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot read {self.manifest_path}: {err}") from err
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{self.manifest_path} has format_version={version!r}; this recollect reads "
                f"format_version={FORMAT_VERSION} memmap directories."
            )
        stored = manifest.get("config") or {}
        # episode_end is kept only when given: one given at creation must be given again
        given = {"episode_end": None} if "episode_end" in stored else {}
        for key, value in {**given, **self.config}.items():
            if key == "spec" and stored.get(key) != value:
                raise CheckpointError(
                    f"memmap directory {self.directory} holds a buffer of another spec: "
                    f"{spec_difference(stored.get(key), value)}. Reopen it with the spec it "
                    "was created with, or use another directory."
                )
            if stored.get(key) != value:
                raise CheckpointError(
                    f"memmap directory {self.directory} holds a buffer with {key}="
                    f"{stored.get(key)!r}, but this buffer has {key}={value!r}. Use the same "
                    "arguments to reopen it, or another directory."
                )
        if self.dirty and not self.recover:
            raise CheckpointError(
                f"memmap directory {self.directory} was written after its last flush(); its "
                "counters no longer match the data. Call buf.flush() (or buf.close()) before "
                "reopening, pass recover=True to reopen it at its last flushed state (the "
                "steps written since are dropped), or delete the directory to start over."
            )
        return read_state(self.directory, resolve=False)

    def _written_clocks(self, t: np.ndarray) -> np.ndarray:
        """Maps ``written.npy`` (created as ``t``); returns the clocks it held, at least ``t``.

        A new file has its blocks reserved before it is mapped (a sparse one would
        kill the process with SIGBUS on a full disk); one of the right shape is
        mapped again as it is.
        """
        path = self.directory / WRITTEN
        before = t
        written = None
        if path.exists():
            try:
                written = map_npy(path)
            except CheckpointError:
                raise
            except Exception as err:  # a torn file: np.load raises EOFError, ValueError, ...
                raise CheckpointError(f"cannot read {path}: {err}") from err
            if written.shape == t.shape and written.dtype == np.int64:
                before = np.maximum(written, t)
            else:
                del written
                written = None
        if written is None:
            written = create_npy_memmap(path, t.shape, np.dtype(np.int64))
        self.written = written
        written[...] = t
        if isinstance(written, np.memmap):
            written.flush()
        return before

    def discard_created(self) -> None:
        """Removes what this buffer created in its directory (after a failed construction):
        the files that were not there before, and the directory if it was new."""
        self.written = None
        for entry in self.directory.iterdir() if self.directory.is_dir() else ():
            if entry.name not in self._before and not entry.is_dir():
                entry.unlink(missing_ok=True)
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.directory.rmdir()

    def _recovered(
        self, state: dict[str, Any], written: np.ndarray, max_length: int
    ) -> tuple[dict[str, Any], np.ndarray]:
        """``state`` with its index cleared of the flushed steps whose slots were rewritten
        after the flush, and int64 ``[num_envs]`` the time before which each row's windows
        are gone (for :meth:`Sampler.drop_before <recollect.samplers.Sampler.drop_before>`)."""
        index = state["index"]
        t = np.asarray(index["t"], np.int64)
        t_clear = np.asarray(index["t_clear"], np.int64)
        lo = np.maximum(t_clear, t - max_length)
        new_clear = np.maximum(t_clear, np.minimum(written - max_length, t))
        new_lo = np.maximum(new_clear, t - max_length)
        self.steps_dropped = int((written - t).sum() + (new_lo - lo).sum())
        return {**state, "index": WindowIndex.cleared_state(index, new_clear)}, new_lo

    def attach(self, storage: Any, table: Any, lock: Any, owner: Any) -> None:
        """Restores the table state of a reopened directory, flushes, and flushes again when
        ``owner`` (the buffer) is garbage collected."""
        if self.saved is not None:
            state = dict(self.saved.state["table"])
            state.pop("rng", None)  # the constructor's rng argument decides the future draws
            try:
                t = np.asarray(state["index"]["t"], np.int64)
                written = self._written_clocks(t)
                dropped = None
                if self.dirty:
                    state, dropped = self._recovered(state, written, table.max_length)
                with table.lock:
                    table.load_state_dict(state)
                    if dropped is not None:  # the sampler forgets the windows cleared
                        table.sampler.drop_before(dropped)
            except (KeyError, TypeError, ValueError, IndexError) as err:
                raise CheckpointError(f"{self.saved.where}: bad table state ({err}).") from err
            if self.dirty:
                warnings.warn(
                    f"memmap directory {self.directory} was not flushed after its last writes; "
                    f"reopened at its last flushed state, {self.steps_dropped} step(s) dropped "
                    "(buf.persistence.recovered_steps_dropped).",
                    UserWarning,
                    stacklevel=4,
                )
        else:
            self._written_clocks(table.clocks)
        self.flush(storage, table, lock)
        weakref.finalize(owner, self.flush, storage, table, lock)

    def before_write(self, rows: np.ndarray | None, times: Any) -> None:
        """Marks the directory dirty (once per flush) and records the clocks about to be
        written (``rows`` None: every row at ``times``); the caller holds the lock."""
        if self.clean:
            create_new(self.directory / DIRTY).close()  # never through a planted link
            self.clean = False
        if self.written is not None:
            if rows is None:
                self.written[...] = np.asarray(times) + 1
            else:
                self.written[rows] = np.asarray(times) + 1

    def flush(self, storage: Any, table: Any, lock: Any) -> None:
        """Flushes the mapped data, then writes the manifest and table state atomically."""
        if not self.directory.is_dir():  # removed under us (e.g. a temporary directory)
            return
        with lock:
            storage.flush()
            state = {"storage": live_state(storage.state_dict()), "table": table.state_dict()}
            write_in_place(self.directory, "ReplayBuffer", self.config, state)
            (self.directory / DIRTY).unlink(missing_ok=True)
            self.clean = True
