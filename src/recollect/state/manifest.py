"""The manifest of every state directory (checkpoints and memmap buffers), format 2.

A state directory holds ``manifest.json`` and ``.npy`` files::

    manifest.json      format, format_version, kind, config, layout, state tree, files
    state-*.npy        array entries of the state tree (one per array)

``config`` holds what rebuilds the empty object (spec described node by
node, capacity, sampler name and arguments, ...); ``state`` is the object's
``state_dict()`` with every array replaced by a reference: ``{"__file__":
name}`` (a whole array), ``{"__columns__": name}`` (ring columns, see
``layout``) or ``{"__memmap__": name}`` (a live memory-mapped file of a
memmap buffer, not checksummed). Ring column files hold only the stored steps:
column ``j`` holds ring slot ``(slot_offset + j) % max_length``; a full ring is
written in slot order (``slot_offset = 0``) so it can be mapped back as is.

Every file is listed in ``manifest["files"]`` with its checksum (``crc32:...``) and
size in bytes, and the manifest carries the sha256 of its own canonical JSON (without
that field), so an edited manifest, a truncated or altered ``.npy`` and a
missing file are all detected. Nothing is pickled. Format 1 directories (the
layout before per-row clocks) are read and upgraded by :mod:`recollect.state.v1`.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from recollect.arguments import is_int
from recollect.errors import CheckpointError
from recollect.specs import ArraySpec
from recollect.state.safe_files import read_regular

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "describe_spec",
    "dump_manifest",
    "from_json",
    "leaf_file_name",
    "parse_manifest",
    "rebuild_spec",
    "spec_difference",
    "to_json",
]

FORMAT_NAME = "recollect-checkpoint"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
_SELF_CHECKSUM = "manifest_sha256"
_REQUIRED = ("format", "format_version", "kind", "files")


# -- spec <-> JSON --------------------------------------------------------
def _described_leaves(node: Any, path: str = "") -> dict[str, Any]:
    """``{leaf path: {"shape", "dtype"}}`` of a :func:`describe_spec` output (containers
    as ``<kind>`` entries, so a changed nest type shows too)."""
    if not isinstance(node, dict) or len(node) != 1:
        return {path or "/": node}
    ((kind, body),) = node.items()
    if kind == "leaf":
        return {path or "/": {"shape": body.get("shape"), "dtype": body.get("dtype")}}
    if kind == "none":
        return {path or "/": None}
    out: dict[str, Any] = {f"{path}<container>": kind}
    if kind == "namedtuple":
        items = list(zip(body.get("fields", []), body.get("children", []), strict=False))
    elif kind == "dict":
        items = [(k, v) for k, v in body]
    else:
        items = [(str(j), v) for j, v in enumerate(body)]
    for key, child in items:
        out.update(_described_leaves(child, f"{path}/{key}" if path else str(key)))
    return out


def spec_difference(saved: Any, wanted: Any) -> str:
    """How two :func:`describe_spec` outputs differ, leaf by leaf, in one short sentence
    (e.g. "leaf 'observation': shape [8] saved, [4] here; leaf 'extra' only here")."""
    a, b = _described_leaves(saved), _described_leaves(wanted)
    parts = []
    for path in sorted(set(a) | set(b)):
        if path not in b:
            parts.append(f"'{path}' only saved")
        elif path not in a:
            parts.append(f"'{path}' only here")
        elif a[path] != b[path]:
            x, y = a[path], b[path]
            if isinstance(x, dict) and isinstance(y, dict):
                diffs = [f"{k} {x[k]} saved, {y.get(k)} here" for k in x if x[k] != y.get(k)]
                parts.append(f"'{path}': " + ", ".join(diffs))
            else:
                parts.append(f"'{path}': {x} saved, {y} here")
    return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")


def describe_spec(node: Any) -> dict[str, Any]:
    """Describes a normalised spec nest (leaves :class:`ArraySpec`) as plain JSON.

    Raises:
        CheckpointError: a node type cannot be described (only dict-like,
            list, tuple, namedtuple and None containers are supported) or a
            dict key is not a string.
    """
    if isinstance(node, ArraySpec):
        return {"leaf": {"shape": list(node.shape), "dtype": node.dtype.str, "name": node.name}}
    if node is None:
        return {"none": None}
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        cls = type(node)
        return {
            "namedtuple": {
                "type": cls.__qualname__,
                "module": cls.__module__,
                "fields": list(node._fields),
                "children": [describe_spec(c) for c in node],
            }
        }
    if isinstance(node, Mapping):
        bad = [k for k in node if not isinstance(k, str)]
        if bad:
            raise CheckpointError(
                f"cannot checkpoint a spec with non-string dict keys {bad!r}; use str keys."
            )
        return {"dict": [[k, describe_spec(v)] for k, v in node.items()]}
    if isinstance(node, tuple | list):
        kind = "tuple" if isinstance(node, tuple) else "list"
        return {kind: [describe_spec(c) for c in node]}
    raise CheckpointError(
        f"cannot checkpoint a spec node of type {type(node).__name__}; supported containers "
        "are dict, list, tuple, namedtuple and None."
    )


def rebuild_spec(desc: Any, where: str = MANIFEST) -> Any:
    """Inverse of :func:`describe_spec`.

    A namedtuple is rebuilt as its original class when that class is already
    imported (nothing is imported on the manifest's say-so) and has the same
    fields; otherwise as a new ``collections.namedtuple`` of that name.

    Raises:
        CheckpointError: the description is malformed.
    """
    try:
        ((kind, body),) = desc.items()
        if kind == "leaf":
            dtype = np.dtype(body["dtype"])
            if dtype.hasobject:
                raise ValueError(f"object dtype {dtype}")
            return ArraySpec(tuple(body["shape"]), dtype, body.get("name"))
        if kind == "none":
            return None
        if kind == "dict":
            return {str(k): rebuild_spec(v, where) for k, v in body}
        if kind in ("tuple", "list"):
            children = [rebuild_spec(c, where) for c in body]
            return tuple(children) if kind == "tuple" else children
        if kind == "namedtuple":
            cls = _namedtuple_class(body["module"], body["type"], list(body["fields"]))
            return cls(*[rebuild_spec(c, where) for c in body["children"]])
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(f"{where}: malformed spec description ({err}).") from err
    raise CheckpointError(f"{where}: unknown spec node kind {kind!r}.")


def _namedtuple_class(module: str, qualname: str, fields: list[str]) -> type:
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if (
        isinstance(obj, type)
        and issubclass(obj, tuple)
        and list(getattr(obj, "_fields", ())) == fields
    ):
        return obj
    name = re.sub(r"\W", "_", qualname.rsplit(".", 1)[-1]) or "Node"
    return collections.namedtuple(name, fields)


# -- JSON values ------------------------------------------------------------
def to_json(value: Any) -> Any:
    """Converts numpy scalars/small arrays inside dicts and lists to plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_json(value: Any) -> Any:
    """Inverse of :func:`to_json`."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.asarray(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


# -- manifest ---------------------------------------------------------------
def _canonical(manifest: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != _SELF_CHECKSUM}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def dump_manifest(manifest: dict[str, Any]) -> bytes:
    """Serialises ``manifest`` with its own checksum added."""
    manifest = dict(manifest)
    manifest[_SELF_CHECKSUM] = hashlib.sha256(_canonical(manifest)).hexdigest()
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def parse_manifest(path: Path) -> dict[str, Any]:
    """Reads and checks ``path/manifest.json`` (structure, version, self-checksum).

    Raises:
        CheckpointError: missing, not JSON, edited (checksum mismatch), not a
            recollect checkpoint, or a newer format version.
    """
    file = path / MANIFEST
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory.")
    try:
        if not file.is_symlink() and not file.exists():
            raise FileNotFoundError(file)
        raw = read_regular(file)  # no link, FIFO or device: CheckpointError
    except FileNotFoundError:
        raise CheckpointError(
            f"{file}: missing; {path} is not a recollect checkpoint (or it was not "
            "completely written)."
        ) from None
    except (OSError, CheckpointError) as err:  # a directory, link or FIFO, unreadable, ...
        raise CheckpointError(
            f"{file}: cannot be read ({err}); the checkpoint is damaged. Restore it from a "
            "backup or discard it."
        ) from err
    try:
        manifest = json.loads(raw)
    except ValueError as err:
        raise CheckpointError(f"{file}: not valid JSON ({err}).") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{file}: not a recollect checkpoint manifest.")
    version = manifest.get("format_version")
    if not is_int(version, minimum=1):
        raise CheckpointError(f"{file}: invalid format_version {version!r}.")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{file}: format_version {version} is newer than this recollect supports "
            f"({FORMAT_VERSION}); upgrade recollect to load it."
        )
    if manifest.get(_SELF_CHECKSUM) != hashlib.sha256(_canonical(manifest)).hexdigest():
        raise CheckpointError(
            f"{file}: checksum mismatch; the manifest was edited or damaged. Restore it "
            "from a backup or discard the checkpoint."
        )
    missing = [k for k in _REQUIRED if k not in manifest]
    if missing:
        raise CheckpointError(f"{file}: missing fields {missing}.")
    return manifest


def leaf_file_name(index: int, path: str) -> str:
    """File name of leaf ``index``: ``leaf-003-observation_camera.npy``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", path)[:60]
    return f"leaf-{index:03d}-{safe}.npy"
