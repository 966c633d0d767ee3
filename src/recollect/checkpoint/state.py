"""Sampler and RNG state in a checkpoint, pickle-free.

A sampler is stored as its class name (resolved on load only among the
samplers recollect exports), its constructor arguments (``get_config()`` when
the sampler defines it, else the ``__init__`` parameters read back from
same-named attributes ``x`` or ``_x``) and its ``state_dict()``; array entries
of the state go to ``.npy`` files, everything else into the manifest.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from recollect.checkpoint.format import from_json, to_json
from recollect.errors import CheckpointError
from recollect.samplers.base import Sampler

__all__ = ["decode_rng", "decode_sampler", "encode_rng", "encode_sampler"]

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
_FILE = "__file__"


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


# -- sampler ----------------------------------------------------------------
def _config(sampler: Sampler) -> dict[str, Any]:
    get_config = getattr(sampler, "get_config", None)
    if callable(get_config):
        return dict(get_config())
    config = {}
    params = inspect.signature(type(sampler).__init__).parameters
    for name, param in list(params.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        for attr in (name, f"_{name}"):
            if hasattr(sampler, attr):
                config[name] = getattr(sampler, attr)
                break
        else:
            if param.default is param.empty:
                raise CheckpointError(
                    f"cannot checkpoint {type(sampler).__name__}: constructor argument "
                    f"{name!r} is not readable back; give the sampler a get_config() method."
                )
    return config


def _encode_tree(value: Any, prefix: str, put_array: Callable[[str, np.ndarray], None]) -> Any:
    if isinstance(value, np.ndarray) and value.ndim > 0:
        name = f"{prefix}.npy"
        put_array(name, value)
        return {_FILE: name}
    if isinstance(value, Mapping):
        return {str(k): _encode_tree(v, f"{prefix}-{k}", put_array) for k, v in value.items()}
    return to_json(value)


def _decode_tree(value: Any, get_array: Callable[[str], np.ndarray]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_FILE}:
            return get_array(value[_FILE])
        if "__ndarray__" in value:
            return from_json(value)
        return {k: _decode_tree(v, get_array) for k, v in value.items()}
    return from_json(value)


def encode_sampler(sampler: Sampler, put_array: Callable[[str, np.ndarray], None]) -> dict:
    """Manifest entry for ``sampler``; ``put_array(name, array)`` writes one state array."""
    return {
        "type": type(sampler).__name__,
        "config": to_json(_config(sampler)),
        "state": _encode_tree(sampler.state_dict(), "sampler", put_array),
    }


def _sampler_class(name: str, where: str) -> type[Sampler]:
    import recollect
    import recollect.samplers

    for namespace in (recollect.samplers, recollect):
        try:
            cls = getattr(namespace, name, None)
        except Exception:
            cls = None
        if isinstance(cls, type) and issubclass(cls, Sampler):
            return cls
    raise CheckpointError(
        f"{where}: unknown sampler type {name!r}; this recollect version does not provide it."
    )


def decode_sampler(entry: Any, get_array: Callable[[str], np.ndarray], where: str) -> tuple:
    """Builds the sampler (unbound) and returns ``(sampler, state)``; apply state after binding.

    Raises:
        CheckpointError: unknown type or arguments the class does not accept.
    """
    try:
        name, config, state = entry["type"], entry["config"], entry["state"]
    except (TypeError, KeyError) as err:
        raise CheckpointError(f"{where}: malformed sampler entry ({err}).") from err
    cls = _sampler_class(name, where)
    try:
        sampler = cls(**from_json(config))
    except Exception as err:
        raise CheckpointError(f"{where}: cannot rebuild sampler {name} ({err}).") from err
    return sampler, _decode_tree(state, get_array)


def state_file_path(root: Path, name: str) -> Path:
    """Path of a state array, refusing names that leave the checkpoint directory."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise CheckpointError(f"{root / 'manifest.json'}: invalid file name {name!r}.")
    return root / name
