"""Save-time checks: refuse a checkpoint that would be written but could never be loaded."""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.errors import CheckpointError, InvalidArgumentError, RecollectError
from recollect.samplers.base import Sampler, registered_sampler
from recollect.specs import FlatSpec

__all__ = ["check_saveable"]


def check_saveable(flat: FlatSpec, sampler: Sampler, sampler_config: dict[str, Any]) -> None:
    """Raises when a checkpoint of a buffer with this spec and sampler could not be loaded.

    Args:
        flat: the buffer's flattened spec.
        sampler: the buffer's sampler.
        sampler_config: the sampler arguments recorded in the buffer's ``config()``.

    Raises:
        CheckpointError: a leaf has a structured (or void) dtype, which the
            manifest cannot describe; the sampler's class is not the one
            registered under its name; or its ``get_config()`` cannot rebuild it.
    """
    for path, leaf in zip(flat.paths, flat.leaves, strict=True):
        dtype = np.dtype(leaf.dtype)
        if dtype.fields is not None or dtype.subdtype is not None or dtype.kind == "V":
            raise CheckpointError(
                f"cannot checkpoint leaf {path!r}: its dtype {dtype} is structured, which a "
                "checkpoint cannot restore. Give each field its own leaf (a dict of plain-dtype "
                "ArraySpecs)."
            )
    cls = type(sampler)
    try:
        registered = registered_sampler(sampler.name)
    except InvalidArgumentError:
        registered = None
    if registered is not cls:
        raise CheckpointError(
            f"cannot checkpoint sampler {cls.__module__}.{cls.__qualname__}: the name "
            f"{sampler.name!r} is registered to {registered!r}, so loading would rebuild another "
            "class. Give the class a unique `name` class attribute."
        )
    try:
        config = sampler.get_config()
        cls(**config)
    except (RecollectError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"cannot checkpoint sampler {cls.__qualname__}: its get_config() cannot rebuild it "
            f"({err}). Override get_config() to return its constructor arguments."
        ) from err
    if not sampler_config and config:
        raise CheckpointError(
            f"cannot checkpoint sampler {cls.__qualname__}: its arguments were not recorded "
            "when the buffer was built. Rebuild the buffer with this sampler."
        )
