"""Reads format-1 directories (before per-row clocks) as format-2 ``(kind, config, state)``.

Format 1 kept one clock for all rows (``buffer.t``, ``buffer.t_clear``), the
leaves as a list in spec order, the sampler as ``{type, config, state}`` and
TransitionBuffer extras in ``transition-*`` files. The golden checkpoints in
``tests/golden/v1`` pin this reader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.arguments import is_int
from recollect.errors import CheckpointError
from recollect.specs import leaf_names

__all__ = ["upgrade"]


def _int(section: Any, key: str, where: str, minimum: int = 0) -> int:
    value = section.get(key) if isinstance(section, dict) else None
    if not is_int(value, minimum):
        raise CheckpointError(f"{where}: field {key} must be an int >= {minimum}; got {value!r}.")
    return int(value)


def _tree(reader: Any, value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__file__"}:
        return reader.array(value["__file__"])
    if isinstance(value, dict) and "__ndarray__" not in value:
        return {k: _tree(reader, v) for k, v in value.items()}
    return reader.decode(value, None)


def _replay(manifest: dict[str, Any], reader: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    where = reader.where
    b = manifest.get("buffer")
    if not isinstance(b, dict):
        raise CheckpointError(f"{where}: field buffer must be an object.")
    num_envs = _int(b, "num_envs", where, 1)
    t, t_clear = _int(b, "t", where), _int(b, "t_clear", where)
    layout = {
        "slot_offset": _int(b, "slot_offset", where),
        "stored_steps": _int(b, "stored_steps", where),
    }
    leaves = manifest.get("leaves")
    if not isinstance(leaves, list) or not all(isinstance(x, dict) for x in leaves):
        raise CheckpointError(f"{where}: field leaves must be a list of objects.")
    names = leaf_names([str(leaf.get("path")) for leaf in leaves])
    sampler = manifest.get("sampler")
    if not isinstance(sampler, dict) or {"type", "config", "state"} - set(sampler):
        raise CheckpointError(f"{where}: malformed sampler entry.")
    config = {
        "spec": manifest.get("spec"),
        "capacity": _int(b, "capacity", where, 1),
        "num_envs": num_envs,
        "sequence_length": b.get("sequence_length"),
        "sampler": {"type": sampler["type"], "config": sampler["config"]},
        "frame_stacks": {},
        "paths": [leaf.get("path") for leaf in leaves],
    }
    columns = {
        n: reader.columns(leaf.get("file"), layout) for n, leaf in zip(names, leaves, strict=True)
    }
    state = {
        "storage": {"columns": columns},
        "table": {
            "index": {
                "t": np.full(num_envs, t, np.int64),
                "t_clear": np.full(num_envs, t_clear, np.int64),
            },
            "sampler": _tree(reader, sampler["state"]),
            "rng": manifest.get("rng"),
        },
        "layout": layout,
    }
    return config, state


def upgrade(manifest: dict[str, Any], reader: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(kind, config, state)`` of a format-1 manifest (files read through ``reader``).

    Raises:
        CheckpointError: a malformed manifest or a missing or damaged file.
    """
    kind, where = manifest["kind"], reader.where
    if kind == "ReplayBuffer":
        return (kind, *_replay(manifest, reader))
    if kind != "TransitionBuffer":
        raise CheckpointError(f"{where}: unknown checkpoint kind {kind!r}.")
    extras = manifest.get("transition")
    header = manifest.get("buffer") if extras is None else extras
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: field transition must be an object.")
    config: dict[str, Any] = {
        "capacity": _int(header, "capacity", where, 1),
        "num_envs": _int(header, "num_envs", where, 1),
        "prioritized": header.get("prioritized"),
        "frame_stack": header.get("frame_stack"),
        "replay": None,
    }
    if extras is None:
        return kind, config, {"rng": manifest.get("rng")}
    config["replay"], replay = _replay(manifest, reader)
    finals = extras.get("finals")
    size, start, n = (_int(finals, k, where) for k in ("size", "start", "n"))
    pending, arrays, k = {}, {}, 0
    while f"transition-pending-{k:03d}.npy" in reader.files:
        pending[f"{k:03d}"] = reader.array(f"transition-pending-{k:03d}.npy")
        arrays[f"{k:03d}"] = reader.array(f"transition-finals-{k:03d}.npy")
        k += 1
    chain = {
        "columns": {"final_ref": reader.columns("transition-final_ref.npy", replay["layout"])},
        "pending": pending,
        "has_pending": reader.array("transition-has_pending.npy"),
        "finals": {
            "arrays": arrays,
            "times": reader.array("transition-finals-times.npy"),
            "size": size,
            "start": start,
            "n": n,
        },
    }
    return kind, config, {"replay": replay, "chain": chain}
