"""Saving :class:`recollect.sb3.ReplayBuffer`: its config, checkpoint and pickle (SB3's
``save_replay_buffer``); the files are written by :mod:`recollect.sb3.persistence`.

Functions of the buffer they save; the buffer's ``config``, ``save_checkpoint``,
``load_checkpoint``, ``__getstate__`` and ``__setstate__`` call them.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces

from recollect.buffers import TransitionBuffer
from recollect.errors import CheckpointError
from recollect.sb3 import persistence
from recollect.sb3.arrays import Sb3Arrays
from recollect.sb3.stack_starts import StackStarts
from recollect.storage.compression.codecs import json_compression
from recollect.storage.frames.frame_store import FrameStack

__all__ = [
    "buffer_config",
    "config_layout",
    "load_checkpoint",
    "options_from_config",
    "pickle_state",
    "restore_pickle_state",
    "save_checkpoint",
]


class ReplayBuffer(Protocol):
    """What these functions read and set on a :class:`recollect.sb3.ReplayBuffer` (the
    module that defines it imports this one, so it is described, not imported)."""

    buffer_size: int
    n_envs: int
    n_step: int
    gamma: float
    optimize_memory_usage: bool
    handle_timeout_termination: bool
    frame_stack: FrameStack | None
    stack_starts: StackStarts | None
    sb3_layout: bool
    transitions: Sb3Arrays | TransitionBuffer
    pos: int
    full: bool
    num_added: int

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        **options: Any,
    ) -> None: ...

    @classmethod
    def options_from_config(cls, options: dict[str, Any]) -> dict[str, Any]: ...

    def config(self) -> dict[str, Any]: ...

    def attach(self, transitions: Sb3Arrays | TransitionBuffer) -> None: ...


Buffer = TypeVar("Buffer", bound=ReplayBuffer)


def buffer_config(buf: ReplayBuffer) -> dict[str, Any]:
    """JSON-able constructor options and counters of ``buf`` (the checkpoint's ``sb3.json``)."""
    stack = buf.frame_stack
    return {
        "class": type(buf).__name__,
        "buffer_size": buf.buffer_size * buf.n_envs,
        "n_envs": buf.n_envs,
        "options": {
            "optimize_memory_usage": buf.optimize_memory_usage,
            "handle_timeout_termination": buf.handle_timeout_termination,
            "frame_stack": None if stack is None else stack.config(),
            **(
                {"compression": json_compression(c)}
                if (c := getattr(buf, "compression", None))  # pickles older than compression
                else {}
            ),
            "n_step": buf.n_step,
            "gamma": buf.gamma,
        },
        "layout": "sb3" if buf.sb3_layout else "transitions",
        "pos": buf.pos,
        "full": buf.full,
        "num_added": buf.num_added,
    }


def options_from_config(options: dict[str, Any]) -> dict[str, Any]:
    """Constructor keyword arguments from the ``options`` of :func:`buffer_config`."""
    stack = options.get("frame_stack")
    if stack is not None:
        padding = stack["padding"]
        padding = padding if isinstance(padding, str) else np.asarray(padding)
        options["frame_stack"] = FrameStack(**{**stack, "padding": padding})
    return options


def save_checkpoint(buf: ReplayBuffer, path: str | os.PathLike) -> None:
    """Writes ``buf`` as a pickle-free checkpoint directory (see
    :meth:`recollect.sb3.ReplayBuffer.save_checkpoint`)."""
    arrays: dict[str, np.ndarray] = {}
    if buf.stack_starts is not None:
        arrays = {
            "previous": buf.stack_starts.previous,
            "has_previous": buf.stack_starts.has_previous,
        }
    persistence.write_sb3_checkpoint(path, buf.transitions, buf.config(), arrays)


def load_checkpoint(
    cls: type[Buffer],
    path: str | os.PathLike,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    device: th.device | str = "auto",
) -> Buffer:
    """A ``cls`` restored from a checkpoint (see
    :meth:`recollect.sb3.ReplayBuffer.load_checkpoint`)."""
    config, transitions, arrays = persistence.read_checkpoint(
        path, Sb3Arrays.load if config_layout(path) == "sb3" else TransitionBuffer.load
    )
    if config.get("class") != cls.__name__:
        raise CheckpointError(
            f"{path} holds a {config.get('class')} checkpoint; load it with that class, "
            f"not {cls.__name__}."
        )
    try:
        options = cls.options_from_config(dict(config["options"]))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: invalid buffer options: {err}") from err
    buf = cls(
        config["buffer_size"],
        observation_space,
        action_space,
        device=device,
        n_envs=config["n_envs"],
        **options,
    )
    if (transitions.capacity, transitions.num_envs) != (buf.transitions.capacity, buf.n_envs):
        raise CheckpointError(f"{path}: transitions do not match buffer_size/n_envs.")
    # checkpoints written before SB3's layout existed hold the one-copy layout: keep it
    buf.sb3_layout = isinstance(transitions, Sb3Arrays)
    buf.attach(transitions)
    buf.pos, buf.full, buf.num_added = config["pos"], config["full"], config["num_added"]
    if buf.stack_starts is not None:
        buf.stack_starts.previous[...] = arrays["previous"]
        buf.stack_starts.has_previous[...] = arrays["has_previous"]
    return buf


def pickle_state(buf: ReplayBuffer) -> dict[str, Any]:
    """``buf``'s pickle state: its attributes, the storage as its kind, config and live
    state arrays (see :mod:`recollect.sb3.persistence`)."""
    state = buf.__dict__.copy()
    transitions = state.pop("transitions")
    core = transitions.replay_buffer if isinstance(transitions, Sb3Arrays) else transitions
    state["storage_state"] = persistence.storage_state(core)
    state.pop("write_leaves", None)  # a method of the storage: set again by attach
    state.pop("add_one", None)  # a closure over the storage: set again by attach
    return state


def restore_pickle_state(buf: ReplayBuffer, state: dict[str, Any]) -> None:
    """Sets ``buf``'s attributes and storage from :func:`pickle_state` (or the pickles of
    earlier versions)."""
    state = dict(state)
    state.pop("dones", None)  # pickles of older versions: now a descriptor
    sb3_layout = state.get("sb3_layout")
    if "storage_state" in state:
        restore = Sb3Arrays.from_saved if sb3_layout else TransitionBuffer.from_saved
        transitions = persistence.storage_from_state(state.pop("storage_state"), restore)
    else:  # pickles of earlier versions: the files of the storage's checkpoint
        load = Sb3Arrays.load if sb3_layout else TransitionBuffer.load
        transitions = persistence.transitions_from_files(state.pop("transitions"), load)
    buf.__dict__.update(state)
    buf.attach(transitions)


def config_layout(path: str | os.PathLike) -> str:
    """The storage layout a checkpoint names (``"transitions"`` for older checkpoints)."""
    return persistence.read_config(path).get("layout", "transitions")
