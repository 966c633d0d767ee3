"""SB3's public buffer arrays on recollect storage (``observations`` ... ``timeouts``).

With SB3's layout every array is a view of recollect's storage (see
:class:`recollect.sb3.arrays.Sb3Arrays`): :class:`Sb3Array` is the descriptor that
:class:`recollect.sb3.ReplayBuffer` declares for each of them and that asks the
buffer's ``transitions`` for the view. Buffers that store each observation once
(``frame_stack``, ``optimize_memory_usage``) have no such arrays, and their
``dones`` only takes SB3's writes (:class:`TrajectoryCuts`).
"""

from __future__ import annotations

from typing import Any, Protocol, Self, overload

from recollect.errors import InvalidArgumentError

__all__ = ["Sb3Array", "TrajectoryCuts", "sb3_array"]


class TrajectoryCuts:
    """Stands in for SB3's ``dones`` array where SB3 writes to it from outside.

    SB3's ``_setup_learn`` marks the newest transition done
    (``replay_buffer.dones[pos] = True``) before a fresh ``learn()`` of a model
    with ``optimize_memory_usage``, so that its single observation array does
    not join the old trajectory to the new one. recollect needs no mark: the
    observation after the env reset does not continue the stored
    ``next_obs``, so the trajectory is cut there anyway. Writes are accepted
    and change nothing; reads raise.
    """

    def __setitem__(self, key: Any, value: Any) -> None:
        del key, value

    def __getitem__(self, key: Any) -> Any:
        raise InvalidArgumentError(
            "recollect.sb3 buffers keep no `dones` array; sample() returns the dones."
        )


class _Buffer(Protocol):
    """What :class:`Sb3Array` reads of the buffer it is declared on."""

    @property
    def sb3_layout(self) -> bool: ...

    @property
    def transitions(self) -> Any: ...

    @property
    def cuts(self) -> TrajectoryCuts: ...


_DOCS = {
    "observations": "SB3's ``observations`` ``[buffer_size, n_envs, *obs_shape]`` (a dict of "
    "them for Dict spaces): a view of the stored observations; writes land in the buffer.",
    "next_observations": "SB3's ``next_observations`` (as ``observations``).",
    "actions": "SB3's ``actions`` ``[buffer_size, n_envs, action_dim]`` (a view).",
    "rewards": "SB3's float32 ``rewards`` ``[buffer_size, n_envs]`` (a view).",
    "dones": "SB3's float32 ``dones`` ``[buffer_size, n_envs]`` (a view; writes such as "
    "``dones[pos - 1] = True`` take effect). With ``frame_stack`` or "
    "``optimize_memory_usage``: an object that accepts SB3's writes and ignores them "
    "(see :class:`TrajectoryCuts`).",
    "timeouts": "SB3's float32 ``timeouts`` ``[buffer_size, n_envs]`` (a view).",
}


def sb3_array(buffer: _Buffer, name: str) -> Any:
    """SB3's array ``name`` of ``buffer`` (a view of its storage).

    Raises:
        AttributeError: ``buffer`` stores each observation once (no SB3 layout).
    """
    if buffer.sb3_layout:
        return buffer.transitions.view(name)
    raise AttributeError(
        f"{type(buffer).__name__} with frame_stack or optimize_memory_usage stores each "
        f"observation once and has no SB3 `{name}` array; use sample() or _get_samples()."
    )


class Sb3Array:
    """SB3's array ``name`` of a buffer: ``buffer.transitions.view(name)`` with SB3's layout.

    Declared on the buffer class (``observations = Sb3Array("observations")``);
    read-only as a property (item writes through the view land in the buffer).
    Without SB3's layout, reading raises AttributeError, except ``dones``,
    which returns the buffer's :class:`TrajectoryCuts`.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = _DOCS[name]

    @overload
    def __get__(self, buffer: None, owner: type) -> Self: ...
    @overload
    def __get__(self, buffer: _Buffer, owner: type) -> Any: ...
    def __get__(self, buffer: _Buffer | None, owner: type) -> Any:
        if buffer is None:  # looked up on the class (docs, introspection)
            return self
        if self.name == "dones" and not buffer.sb3_layout:
            return buffer.cuts
        return sb3_array(buffer, self.name)

    def __set__(self, buffer: _Buffer, value: Any) -> None:
        raise AttributeError(
            f"SB3's `{self.name}` of {type(buffer).__name__} is a view of its storage and "
            f"cannot be replaced; write into it instead (buffer.{self.name}[...] = value)."
        )
