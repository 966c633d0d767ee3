"""Saving :class:`recollect.sb3.ReplayBuffer`: its checkpoint and its pickle (SB3's
``save_replay_buffer``); the files are written by :mod:`recollect.sb3.persistence`."""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import torch as th
from gymnasium import spaces

from recollect.buffers import TransitionBuffer
from recollect.errors import CheckpointError
from recollect.sb3 import persistence
from recollect.sb3.arrays import Sb3Arrays
from recollect.sb3.stack_starts import StackStarts
from recollect.storage.codecs import json_compression
from recollect.storage.frame_store import FrameStack

__all__ = ["Saving", "config_layout"]


class Saving:
    """Mixin of :class:`recollect.sb3.ReplayBuffer`: ``config``, checkpoints, pickling.

    Reads the buffer's options, counters and storage (declared below) and
    builds it with the buffer's constructor.
    """

    buffer_size: int
    n_envs: int
    optimize_memory_usage: bool
    handle_timeout_termination: bool
    frame_stack: FrameStack | None
    n_step: int
    gamma: float
    sb3_layout: bool
    pos: int
    full: bool
    num_added: int
    stack_starts: StackStarts | None
    transitions: Sb3Arrays | TransitionBuffer

    if TYPE_CHECKING:  # provided by the buffer class this is mixed into

        def __init__(
            self,
            buffer_size: int,
            observation_space: spaces.Space,
            action_space: spaces.Space,
            device: th.device | str = "auto",
            n_envs: int = 1,
            **options: Any,
        ) -> None: ...

        def attach(self, transitions: Sb3Arrays | TransitionBuffer) -> None: ...

    def config(self) -> dict[str, Any]:
        """JSON-able constructor options and counters (the checkpoint's ``sb3.json``)."""
        stack = self.frame_stack
        return {
            "class": type(self).__name__,
            "buffer_size": self.buffer_size * self.n_envs,
            "n_envs": self.n_envs,
            "options": {
                "optimize_memory_usage": self.optimize_memory_usage,
                "handle_timeout_termination": self.handle_timeout_termination,
                "frame_stack": None if stack is None else stack.config(),
                **(
                    {"compression": json_compression(c)}
                    if (c := getattr(self, "compression", None))
                    else {}
                ),
                "n_step": self.n_step,
                "gamma": self.gamma,
            },
            "layout": "sb3" if self.sb3_layout else "transitions",
            "pos": self.pos,
            "full": self.full,
            "num_added": self.num_added,
        }

    @classmethod
    def options_from_config(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Constructor keyword arguments from the ``options`` of :meth:`config`."""
        stack = options.get("frame_stack")
        if stack is not None:
            padding = stack["padding"]
            padding = padding if isinstance(padding, str) else np.asarray(padding)
            options["frame_stack"] = FrameStack(**{**stack, "padding": padding})
        return options

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Writes a pickle-free checkpoint directory (see :mod:`recollect.sb3.persistence`).

        Raises:
            CheckpointError: ``path`` is another, non-checkpoint directory.
            InvalidArgumentError: an option cannot be written without pickle
                (a custom ``beta`` callable).
        """
        arrays: dict[str, np.ndarray] = {}
        if self.stack_starts is not None:
            arrays = {
                "previous": self.stack_starts.previous,
                "has_previous": self.stack_starts.has_previous,
            }
        persistence.write_checkpoint(path, self.transitions, self.config(), arrays)

    @classmethod
    def load_checkpoint(
        cls,
        path: str | os.PathLike,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
    ) -> Self:
        """Restores a buffer written by :meth:`save_checkpoint` (data, counters, RNG, priorities).

        The spaces are not stored (they are not JSON); pass the model's.

        Raises:
            CheckpointError: damaged files, another format or buffer class, or a
                checkpoint whose geometry differs from what it restores.
        """
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

    def __copy__(self) -> Self:
        """A copy with its own storage (as ``copy.deepcopy``): a pickle's state holds the
        live storage arrays, which a shallow copy would otherwise share."""
        return copy.deepcopy(self)

    def __getstate__(self) -> dict[str, Any]:
        """SB3's ``save_replay_buffer`` pickle: the attributes, the storage as its kind,
        config and live state arrays (see :mod:`recollect.sb3.persistence`)."""
        state = self.__dict__.copy()
        transitions = state.pop("transitions")
        core = transitions.replay_buffer if isinstance(transitions, Sb3Arrays) else transitions
        state["storage_state"] = persistence.storage_state(core)
        state.pop("write_leaves", None)  # a method of the storage: set again by attach
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        state.pop("dones", None)  # pickles of older versions: now a property
        sb3_layout = state.get("sb3_layout")
        if "storage_state" in state:
            restore = Sb3Arrays.from_saved if sb3_layout else TransitionBuffer.from_saved
            transitions = persistence.storage_from_state(state.pop("storage_state"), restore)
        else:  # pickles of earlier versions: the files of the storage's checkpoint
            load = Sb3Arrays.load if sb3_layout else TransitionBuffer.load
            transitions = persistence.transitions_from_files(state.pop("transitions"), load)
        self.__dict__.update(state)
        self.attach(transitions)


def config_layout(path: str | os.PathLike) -> str:
    """The storage layout a checkpoint names (``"transitions"`` for older checkpoints)."""
    return persistence.read_config(path).get("layout", "transitions")
