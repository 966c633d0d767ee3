"""Saving the SB3 buffers: pickle (SB3's ``save_replay_buffer``) and a pickle-free checkpoint.

Pickle: SB3 pickles the whole buffer object. The recollect buffer inside holds
locks and is not picklable itself, so it travels as its kind, ``config()`` and
``state_dict()`` (:func:`storage_state` / :func:`storage_from_state`): the live
storage arrays, which pickle writes as they are, without a copy in memory or on
disk (as SB3's own arrays). Pickles of earlier versions hold the bytes of the
storage's checkpoint directory instead (:func:`transitions_from_files`).

Checkpoint (``buf.save_checkpoint(path)``), a directory::

    path/sb3.json          format name and version, class, constructor options, pos/full/counters
    path/transitions/      recollect's TransitionBuffer checkpoint (manifest, .npy, checksums)
    path/sb3-*.npy         extra arrays of the SB3 layer, loaded with allow_pickle=False

It is written into a sibling temporary directory and renamed into place; an
existing checkpoint at ``path`` is replaced only after the new one is complete.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from recollect.arguments import is_int
from recollect.buffers import ReplayBuffer, TransitionBuffer
from recollect.errors import CheckpointError
from recollect.state.files import Saved

__all__ = [
    "CONFIG",
    "FORMAT",
    "FORMAT_VERSION",
    "UnpickledColumn",
    "read_checkpoint",
    "read_config",
    "storage_from_state",
    "storage_state",
    "transitions_from_files",
    "write_sb3_checkpoint",
]

FORMAT = "recollect.sb3"
FORMAT_VERSION = 1
CONFIG = "sb3.json"
TRANSITIONS = "transitions"


def storage_state(storage: Any) -> dict[str, Any]:
    """What a pickle holds of ``storage`` (a core ``ReplayBuffer`` or ``TransitionBuffer``):
    ``{"kind", "config", "state"}``, the state's arrays the live ones (not copies).

    Pickle them while no ``add`` runs (SB3 saves between steps).
    """
    kind = storage.reader.kind if isinstance(storage, ReplayBuffer) else storage.kind
    return {"kind": kind, "config": storage.config(), "state": storage.state_dict()}


def storage_from_state(saved: dict[str, Any], load: Callable[..., Any]) -> Any:
    """Restores :func:`storage_state` output with ``load`` (``TransitionBuffer.from_saved``
    or ``Sb3Arrays.from_saved``).

    The unpickled ring arrays become the storage's arrays (no second copy), so a
    loaded buffer holds its data once, as SB3's own.

    Raises:
        CheckpointError: the state is malformed or of another kind.
    """
    try:
        kind, config, state = saved["kind"], saved["config"], _adopt(saved["state"])
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"a pickled replay buffer lacks its storage state ({err}).") from err
    # mmap=True: take the ring columns as they are (UnpickledColumn.map) and skip the
    # MemAvailable check, as the data is already in memory
    return load(Saved(kind, config, state, {}, "pickled replay buffer"), mmap=True)


class UnpickledColumn:
    """A ring column of a pickled buffer, as a :class:`~recollect.storage.base.ColumnSource`:
    :meth:`map` hands the unpickled array itself to the restored storage (nothing else
    holds it)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def read_into(self, dest: np.ndarray) -> None:
        """Copies the column into ``dest``.

        Raises:
            CheckpointError: the column has another shape or dtype than ``dest``.
        """
        self.check(dest.shape, dest.dtype)
        dest[...] = self.array

    def map(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """The array itself when it is a writable C-contiguous ``shape``/``dtype`` array, else None.

        Raises:
            CheckpointError: the column has another shape or dtype.
        """
        self.check(shape, dtype)
        a = self.array
        return a if a.flags.writeable and a.flags.c_contiguous else None

    def check(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        a = self.array
        if a.shape != tuple(shape) or a.dtype != dtype:
            raise CheckpointError(
                f"a pickled replay buffer holds a column of shape {a.shape}, dtype {a.dtype}; "
                f"its storage needs shape {tuple(shape)}, dtype {dtype}. The pickle is damaged."
            )


def _adopt(tree: Any) -> Any:
    """``tree`` with the arrays of every ``"columns"`` dict as :class:`UnpickledColumn`."""
    if not isinstance(tree, dict):
        return tree
    out = {}
    for key, value in tree.items():
        if key == "columns" and isinstance(value, dict):
            value = {
                name: UnpickledColumn(a) if isinstance(a, np.ndarray) else a
                for name, a in value.items()
            }
        out[key] = _adopt(value)
    return out


def transitions_from_files(
    files: dict[str, bytes], load: Callable[[Path], Any] = TransitionBuffer.load
) -> Any:
    """Restores the storage of a pickle of an earlier version (``{relative path: bytes}``
    of its checkpoint directory) with ``load`` (``TransitionBuffer.load`` or ``Sb3Arrays.load``).

    Raises:
        CheckpointError: the files do not form a valid checkpoint.
    """
    with tempfile.TemporaryDirectory(prefix="recollect-sb3-") as tmp:
        root = Path(tmp) / TRANSITIONS
        for name, data in files.items():
            target = (root / name).resolve()
            if root.resolve() not in target.parents:
                raise CheckpointError(f"pickled replay buffer holds a bad file name {name!r}.")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return load(root)


def _fsync_tree(root: Path) -> None:
    for p in [*root.rglob("*"), root]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_sb3_checkpoint(
    path: str | os.PathLike,
    transitions: Any,
    config: dict[str, Any],
    arrays: dict[str, np.ndarray],
) -> None:
    """Writes a checkpoint directory atomically (see the module docstring).

    Args:
        path: the checkpoint directory.
        transitions: the recollect buffer.
        config: JSON-able SB3-layer state (constructor options and counters).
        arrays: extra arrays, saved as ``sb3-<name>.npy``.

    Raises:
        CheckpointError: ``path`` exists and is not a checkpoint of this format
            (it is left untouched).
    """
    path = Path(path)
    if path.exists() and not (path / CONFIG).is_file():
        raise CheckpointError(
            f"{path} exists and is not a recollect SB3 checkpoint (no {CONFIG}); refusing to "
            "replace it. Choose another path or remove it."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        tmp.mkdir()
        transitions.save(tmp / TRANSITIONS)
        for name, array in arrays.items():
            np.save(tmp / f"sb3-{name}.npy", np.asarray(array), allow_pickle=False)
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **config}
        (tmp / CONFIG).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        _fsync_tree(tmp)
        old = None
        if path.exists():
            old = path.with_name(f"{path.name}.old-{secrets.token_hex(4)}")
            path.rename(old)
        tmp.rename(path)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The ``sb3.json`` manifest of a checkpoint written by :func:`write_sb3_checkpoint`.

    Raises:
        CheckpointError: a missing or unreadable file, another format, or a
            newer format version.
    """
    path = Path(path)
    try:
        config = json.loads((path / CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"cannot read {path / CONFIG}: {err}") from err
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{path / CONFIG} is not a {FORMAT} checkpoint manifest.")
    version = config.get("format_version")
    if not is_int(version) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version={version!r}; this recollect reads <= {FORMAT_VERSION}. "
            "Upgrade recollect."
        )
    return config


def read_checkpoint(
    path: str | os.PathLike, load: Callable[[Path], Any] = TransitionBuffer.load
) -> tuple[dict[str, Any], Any, dict[str, np.ndarray]]:
    """Reads ``(config, transitions, arrays)`` of a checkpoint written by
    :func:`write_sb3_checkpoint`, the storage with ``load``.

    Raises:
        CheckpointError: a missing or unreadable file, another format, or a
            newer format version.
    """
    path = Path(path)
    config = read_config(path)
    transitions = load(path / TRANSITIONS)
    arrays = {}
    for file in sorted(path.glob("sb3-*.npy")):
        name = file.name[len("sb3-") : -len(".npy")]
        try:
            arrays[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot read {file}: {err}") from err
    return config, transitions, arrays
