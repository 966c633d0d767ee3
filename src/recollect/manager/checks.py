"""The manager's argument checks: a buffer restored from a checkpoint, or a served table
attached to, must match the arguments the manager was given."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.errors import InvalidArgumentError
from recollect.samplers.base import Sampler
from recollect.specs import ArraySpec, FlatSpec
from recollect.storage.episode_ends import resolve_episode_end

__all__ = [
    "TRAJECTORY_LAST",
    "check_checkpoint_matches",
    "check_episode_end",
    "leaves_differ",
    "reverb_checkpoint",
    "trajectory_episode_end",
]

#: TF-Agents' ``StepType.LAST``: a ``Trajectory`` step of this ``step_type`` is the boundary
#: step (last time step -> first of the next episode) that ends an episode
TRAJECTORY_LAST = 2


def _structure(node: Any) -> Any:
    """A comparable description of a spec's nest structure (not its leaves): containers,
    dict keys (in any order), namedtuple names and fields, ``"*"`` for each leaf."""
    if isinstance(node, ArraySpec):
        return "*"
    if node is None:
        return None
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        children = tuple(_structure(c) for c in node)
        return ("namedtuple", type(node).__qualname__, tuple(node._fields), children)
    if isinstance(node, Mapping):
        items = sorted(node.items(), key=lambda kv: repr(kv[0]))
        return ("dict", tuple((k, _structure(v)) for k, v in items))
    if isinstance(node, tuple | list):
        return (type(node).__name__, tuple(_structure(c) for c in node))
    return ("node", type(node).__qualname__, repr(node))


def _render(flat: FlatSpec) -> str:
    """The nest structure as optree prints it: ``Transition(action=*, observation=*)``."""
    text = repr(flat.treedef)
    return text[len("PyTreeSpec(") : -1] if text.startswith("PyTreeSpec(") else text


def leaves_differ(data_spec: Any, flat: FlatSpec) -> str | None:
    """None when ``data_spec`` has ``flat``'s leaves (paths, shapes, dtypes) and nest
    structure, else the message's middle: ``"has leaves [...], the manager's data_spec
    [...]"``, or for the same leaves in another nest ``"has the structure {...} ...,
    the manager's data_spec the structure Transition(...)"``.

    The structure counts: a buffer returns samples in its own spec's structure, so
    a dict spec of the same leaves as a checkpoint's namedtuple spec would get
    namedtuple samples.
    """
    want = FlatSpec(data_spec)
    have = list(zip(flat.paths, flat.shapes, map(str, flat.dtypes), strict=True))
    given = list(zip(want.paths, want.shapes, map(str, want.dtypes), strict=True))
    if sorted(have) != sorted(given):
        return f"has leaves {have}, the manager's data_spec {given}"
    if _structure(want.spec) != _structure(flat.spec):  # same leaves, in another nest
        return (
            f"has the structure {_render(flat)} (samples come back in it), the manager's "
            f"data_spec the structure {_render(want)}"
        )
    return None


def check_checkpoint_matches(
    buffer: ReplayBuffer,
    directory: Path | None,
    data_spec: Any,
    given: dict[str, int | None],
    sampler: Sampler | None,
) -> None:
    """Checks a restored ``buffer`` against the manager's arguments.

    Args:
        buffer: the buffer loaded from the checkpoint in ``directory``.
        directory: the checkpoint directory (named in the messages).
        data_spec: the manager's spec, or None (not checked).
        given: ``{"capacity": ..., "num_envs": ..., "sequence_length": ...}``;
            None values are not checked.
        sampler: a sampler of the class the manager was given, or None.

    Raises:
        InvalidArgumentError: the spec (its nest structure or its leaves), a given
            value or the sampler's class differs (the message names it and what to do).
    """
    differ = None if data_spec is None else leaves_differ(data_spec, buffer.writer.flat_spec)
    if differ is not None:
        raise InvalidArgumentError(
            f"the checkpoint in {directory} {differ}. "
            "Pass the checkpoint's spec (or none), or create a new buffer elsewhere."
        )
    stored = {
        "capacity": buffer.capacity,
        "num_envs": buffer.num_envs,
        "sequence_length": buffer.reader.sequence_length,
    }
    for name, wanted in given.items():
        if wanted is not None and wanted != stored[name]:
            raise InvalidArgumentError(
                f"the checkpoint in {directory} has {name}={stored[name]}; the manager "
                f"was given {name}={wanted}. Drop the argument (or pass {name}={stored[name]}) "
                "to continue the checkpoint, or create a new buffer elsewhere."
            )
    if sampler is not None and type(sampler) is not type(buffer.reader.sampler):
        raise InvalidArgumentError(
            f"the checkpoint in {directory} has a {type(buffer.reader.sampler).__name__} "
            f"sampler; the manager was given a {type(sampler).__name__}. A loaded buffer "
            "keeps its sampler and its state: drop the sampler argument or create a new "
            "buffer elsewhere."
        )


def trajectory_episode_end(data_spec: Any) -> tuple[str, int] | None:
    """``("step_type", 2)`` for a TF-Agents ``Trajectory`` spec, else None.

    A ``Trajectory`` spec has top-level integer scalar ``step_type`` and ``next_step_type``
    leaves (and no ``is_last`` leaf, which would mark episode ends itself). Its boundary
    steps (``step_type == StepType.LAST``) end episodes: Reverb's
    ``ReverbAddTrajectoryObserver`` writes items that end on one but never hold one
    before their end.
    """
    if data_spec is None:
        return None
    flat = FlatSpec(data_spec)
    if "is_last" in flat.paths:
        return None
    for path in ("step_type", "next_step_type"):
        if path not in flat.paths:
            return None
        i = flat.index(path)
        if flat.shapes[i] != () or flat.dtypes[i].kind not in "iu":
            return None
    return ("step_type", TRAJECTORY_LAST)


def check_episode_end(buffer: ReplayBuffer, directory: Path | None, episode_end: Any) -> None:
    """Checks a restored ``buffer``'s episode ends against the manager's ``episode_end``
    (None: not checked).

    Raises:
        InvalidArgumentError: they mark other steps (the message names both).
    """
    if episode_end is None:
        return
    flat = buffer.writer.flat_spec
    stored = buffer.config().get("episode_end")
    if resolve_episode_end(flat, episode_end) != resolve_episode_end(flat, stored):
        default = " (the spec's bool is_last leaf, if any)" if stored is None else ""
        raise InvalidArgumentError(
            f"the checkpoint in {directory} has episode_end={stored!r}{default}; the manager "
            f"was given episode_end={episode_end!r}. Drop the argument to continue the "
            "checkpoint, or create a new buffer elsewhere."
        )


#: the files of one checkpoint that dm-reverb's DefaultCheckpointer writes
REVERB_FILES = ("tables.tfrecord", "chunks.tfrecord", "DONE")


def reverb_checkpoint(directory: str | Path) -> Path | None:
    """The latest complete checkpoint dm-reverb's ``DefaultCheckpointer`` wrote in
    ``directory`` (a ``<timestamp>/`` folder holding ``tables.tfrecord``,
    ``chunks.tfrecord`` and ``DONE``), or None when it holds none."""
    root = Path(directory)
    if not root.is_dir():
        return None
    done = [
        child
        for child in root.iterdir()
        if child.is_dir() and all((child / name).is_file() for name in REVERB_FILES)
    ]
    return max(done, key=lambda child: child.name) if done else None
