"""Saving and restoring a :class:`~recollect.TransitionBuffer`: the inner
:class:`~recollect.ReplayBuffer`'s state plus the observation chains (held by its
:class:`~recollect.buffers.transition_reads.TransitionReader`)."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np

from recollect.buffers.replay_buffer import RngLike, buffer_from_saved
from recollect.buffers.transition_items import ItemForm
from recollect.buffers.transition_reads import TransitionReader
from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.samplers.prioritized import Prioritized
from recollect.state.files import Saved, write_checkpoint
from recollect.state.rng import decode_rng, encode_rng
from recollect.storage.compression.codecs import json_compression
from recollect.storage.factory import check_storage
from recollect.storage.frames.frame_store import FrameStack

__all__ = [
    "KIND",
    "checked_frame_stack",
    "checked_storage",
    "empty_state",
    "prioritized_sampler",
    "save_checkpoint",
    "transition_config",
    "transitions_from_saved",
]

#: The checkpoint kind of a TransitionBuffer.
KIND = "TransitionBuffer"


def transition_config(
    capacity: int,
    num_envs: int,
    prioritized: Prioritized | None,
    frame_stack: FrameStack | None,
    compression: dict[str, Any] | None,
    reader: TransitionReader | None,
    form: ItemForm | None,
) -> dict[str, Any]:
    """``TransitionBuffer.config()``: JSON-able construction arguments (and the inner
    buffer's, once built; the appended item form, once appended)."""
    return {
        "capacity": capacity,
        "num_envs": num_envs,
        "prioritized": None if prioritized is None else prioritized.get_config(),
        "frame_stack": None if frame_stack is None else frame_stack.config(),
        **({"compression": json_compression(compression)} if compression else {}),
        "replay": None if reader is None else reader.replay_buffer.config(),
        **({} if form is None else {"item_form": form.config()}),
    }


def empty_state(rng: RngLike) -> dict[str, Any]:
    """The state of a TransitionBuffer before its first add: its generator (or None)."""
    generator = rng if isinstance(rng, np.random.Generator) else None
    if generator is None and rng is not None:
        generator = np.random.default_rng(rng)
    return {"rng": None if generator is None else encode_rng(generator)}


def save_checkpoint(
    path: str | os.PathLike,
    config: dict[str, Any],
    reader: TransitionReader | None,
    state: Any,
) -> Any:
    """Writes a TransitionBuffer checkpoint directory, atomically; ``state()`` gives its
    state dict (called under the buffer lock). Returns the absolute path."""
    if reader is None:
        return write_checkpoint(path, KIND, config, state())
    buffer = reader.replay_buffer
    buffer.persistence.check_saveable()
    with buffer.writer.lock:
        return write_checkpoint(path, KIND, config, state(), buffer.persistence.stored_layout())


def transitions_from_saved(cls: Any, saved: Saved, *, mmap: bool = False) -> Any:
    """``cls.from_saved(saved)`` for ``cls`` TransitionBuffer (or a subclass): constructs
    it from the saved options, then restores the inner buffer and chains into it.

    Raises:
        CheckpointError: another kind, or a malformed configuration or state.
    """
    where = saved.where
    if saved.kind != KIND:
        raise CheckpointError(
            f"{where}: holds a {saved.kind}, not a {KIND}; load it with "
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
        form = config.get("item_form")
        item_form = None if form is None else ItemForm.from_config(form)
        tb = cls(
            config["capacity"],
            config["num_envs"],
            decode_rng(state.get("rng"), where) if config.get("replay") is None else None,
            prioritized=False if prioritized is None else Prioritized(**prioritized),
            frame_stack=stack,
            compression=config.get("compression"),
        )
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{where}: invalid TransitionBuffer options: {err}") from err
    if config.get("replay") is None:
        return tb
    buffer = buffer_from_saved(
        Saved("ReplayBuffer", config["replay"], state["replay"], saved.manifest, where),
        mmap=mmap,
    )
    spec = buffer.data_spec
    if not isinstance(spec, dict) or "observation" not in spec:
        raise CheckpointError(f"{where}: a TransitionBuffer spec needs an 'observation' entry.")
    try:
        tb.restore(buffer, state["chain"], item_form=item_form)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: bad TransitionBuffer state ({err}).") from err
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from err
    return tb


def prioritized_sampler(prioritized: Any) -> Prioritized | None:
    """The sampler of ``TransitionBuffer(prioritized=...)``: None for False (uniform).

    Raises:
        InvalidArgumentError: not True, False, None or a Prioritized.
    """
    if isinstance(prioritized, Prioritized):
        return prioritized
    if prioritized is True:
        return Prioritized()
    if prioritized is False or prioritized is None:
        return None
    raise InvalidArgumentError(
        f"`prioritized` must be True, False or a recollect.Prioritized(...); got {prioritized!r}."
    )


def checked_frame_stack(frame_stack: Any) -> FrameStack | None:
    """``frame_stack`` when it is a FrameStack or None.

    Raises:
        InvalidArgumentError: anything else.
    """
    if frame_stack is not None and not isinstance(frame_stack, FrameStack):
        raise InvalidArgumentError(
            f"`frame_stack` must be a recollect.FrameStack or None; got {frame_stack!r}."
        )
    return frame_stack


def checked_storage(storage: Any, directory: Any) -> dict[str, Any]:
    """``{"storage": ..., "directory": ...}`` for the inner ReplayBuffer; ``{}`` for RAM.

    Raises:
        InvalidArgumentError: ``storage`` not ``"numpy"``/``"memmap"``; ``directory``
            missing for memmap or given for numpy; a ``directory`` that exists and is
            not an empty directory (a TransitionBuffer keeps its chains in RAM, so it
            never reopens one).
    """
    check_storage(storage)
    if (storage == "memmap") != (directory is not None):
        raise InvalidArgumentError(
            "`directory` is required with storage='memmap' and only allowed with it; got "
            f"storage={storage!r}, directory={directory!r}."
        )
    if directory is None:
        return {}
    path = pathlib.Path(directory)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InvalidArgumentError(
            f"TransitionBuffer(storage='memmap') needs a new or empty directory; got "
            f"directory={str(path)!r}, which {'holds files' if path.is_dir() else 'is a file'}. "
            "A TransitionBuffer keeps its final observations in RAM and does not reopen a "
            "directory: use save()/load() to keep one, or pass another directory."
        )
    return {"storage": storage, "directory": path}
