"""RNG state in a checkpoint, pickle-free: the bit generator's state as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.state.manifest import from_json, to_json

__all__ = ["decode_rng", "encode_rng", "state_file_path"]

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


# -- RNG --------------------------------------------------------------------
def encode_rng(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's bit-generator state as JSON (Python ints are exact in JSON)."""
    return to_json(rng.bit_generator.state)


def decode_rng(state: Any, where: str) -> np.random.Generator | None:
    """Rebuilds a generator in exactly the saved state; None stays None.

    Raises:
        CheckpointError: unknown bit generator or malformed state.
    """
    if state is None:
        return None
    try:
        state = from_json(state)
        name = state["bit_generator"]
        if name not in _BIT_GENERATORS:
            raise ValueError(f"unknown bit generator {name!r}")
        bit_generator = getattr(np.random, name)()
        bit_generator.state = state
    except Exception as err:
        raise CheckpointError(f"{where}: malformed rng state ({err}).") from err
    return np.random.Generator(bit_generator)


def state_file_path(root: Path, name: str) -> Path:
    """Path of a state array, refusing names that leave the checkpoint directory."""
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name.startswith(".")
    ):
        raise CheckpointError(
            f"{root / 'manifest.json'}: invalid file name {name!r} (empty, NUL, a path or "
            "hidden); the manifest was edited or damaged. Restore it from a backup."
        )
    return root / name
