"""The manager's argument checks: a buffer restored from a checkpoint, or a served table
attached to, must match the arguments the manager was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.errors import InvalidArgumentError
from recollect.samplers.base import Sampler
from recollect.specs import FlatSpec

__all__ = ["check_checkpoint_matches", "leaves_differ"]


def leaves_differ(data_spec: Any, flat: FlatSpec) -> str | None:
    """None when ``data_spec`` has ``flat``'s leaves (paths, shapes, dtypes), else the
    message's middle: ``"has leaves [...], the manager's data_spec [...]"``."""
    want = FlatSpec(data_spec)
    if (want.paths, want.shapes, want.dtypes) == (flat.paths, flat.shapes, flat.dtypes):
        return None
    return (
        f"has leaves {list(zip(flat.paths, flat.shapes, map(str, flat.dtypes), strict=True))}, "
        "the manager's data_spec "
        f"{list(zip(want.paths, want.shapes, map(str, want.dtypes), strict=True))}"
    )


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
        InvalidArgumentError: the spec, a given value or the sampler's class differs
            (the message names it and what to do).
    """
    differ = None if data_spec is None else leaves_differ(data_spec, buffer.flat_spec)
    if differ is not None:
        raise InvalidArgumentError(
            f"the checkpoint in {directory} {differ}. "
            "Use the checkpoint's spec, or create a new buffer."
        )
    stored = {
        "capacity": buffer.capacity,
        "num_envs": buffer.num_envs,
        "sequence_length": buffer.sequence_length,
    }
    for name, wanted in given.items():
        if wanted is not None and wanted != stored[name]:
            raise InvalidArgumentError(
                f"the checkpoint in {directory} has {name}={stored[name]}; the manager "
                f"was given {name}={wanted}. Drop the argument (or pass {name}={stored[name]}) "
                "to continue the checkpoint, or create a new buffer elsewhere."
            )
    if sampler is not None and type(sampler) is not type(buffer.sampler):
        raise InvalidArgumentError(
            f"the checkpoint in {directory} has a {type(buffer.sampler).__name__} "
            f"sampler; the manager was given a {type(sampler).__name__}. A loaded buffer "
            "keeps its sampler and its state: drop the sampler argument or create a new "
            "buffer elsewhere."
        )
