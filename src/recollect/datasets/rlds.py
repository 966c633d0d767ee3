"""RLDS datasets: a buffer's complete episodes as a TFDS dataset, and any RLDS episodes back.

Needs ``pip install 'recollect[rlds]'`` (tensorflow, tensorflow-datasets);
both are imported when a function runs, never by ``import recollect``.

An RLDS episode is a dict with ``steps``: a ``tf.data.Dataset`` of steps
``observation, action, reward, discount, is_first, is_last, is_terminal``
(plus any other step fields). :func:`to_rlds` writes one TFDS example per
episode with ``tfds.dataset_builders.store_as_tfds_dataset`` (features: a
``FeaturesDict`` with ``steps: tfds.features.Dataset``, every leaf a lossless
``tfds.features.Tensor``), readable with ``tfds.builder_from_directory``.
:func:`from_rlds` accepts any ``tf.data.Dataset`` of RLDS episodes, like
TF-Agents' ``rlds_to_reverb``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recollect.buffers import ReplayBuffer
from recollect.datasets.episodes import _stored_episodes, require_rlds_spec
from recollect.datasets.filling import plan_rows, row_length, write_rows
from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import ArraySpec, FlatSpec

__all__ = ["RldsExport", "features_from_spec", "from_rlds", "to_rlds"]

_MAX_STEPS = 2**31 - 1  # batch size that holds a whole episode's steps


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f"recollect.datasets needs {name} for RLDS datasets ({err}); "
            "pip install 'recollect[rlds]'."
        ) from err


@dataclass(frozen=True)
class RldsExport:
    """What :func:`to_rlds` wrote.

    Attributes:
        path: the TFDS dataset directory (pass it to ``tfds.builder_from_directory``).
        episodes: complete episodes written (split ``"train"``, oldest first per row).
        steps: RLDS steps written.
        skipped: episode parts left out (cut by the ring or still running).
    """

    path: Path
    episodes: int
    steps: int
    skipped: int


def features_from_spec(spec: Any, path: str = "") -> Any:
    """The TFDS feature of a spec nest: dicts -> ``FeaturesDict``, leaves -> ``Tensor``.

    Raises:
        SpecError: a container is not a dict (TFDS features have no tuples).
    """
    tfds = _import("tensorflow_datasets")
    if isinstance(spec, ArraySpec):
        return tfds.features.Tensor(shape=spec.shape, dtype=spec.dtype)
    if not hasattr(spec, "keys"):
        raise SpecError(
            f"to_rlds: '{path or '<root>'}' is a {type(spec).__name__}; RLDS (TFDS) steps "
            "nest only dicts. Use dicts in the spec."
        )
    return {key: features_from_spec(spec[key], f"{path}/{key}".lstrip("/")) for key in spec}


def to_rlds(
    buf: ReplayBuffer,
    directory: str | os.PathLike,
    *,
    name: str = "recollect_buffer",
    version: str = "1.0.0",
) -> RldsExport:
    """Writes the complete episodes stored in ``buf`` as an RLDS dataset (TFDS format).

    The dataset is built in a temporary directory next to ``directory`` and
    renamed into place, so ``directory`` never holds half a dataset. Episode
    order is kept (shuffling disabled).

    Args:
        buf: an episode-aware buffer whose spec is a dict with top-level bool
            ``is_last`` (RLDS keys recommended; every top-level leaf becomes a
            step field).
        directory: where the dataset goes; must not exist yet.
        name, version: the TFDS dataset name and version.

    Returns:
        :class:`RldsExport`.

    Raises:
        SpecError: no top-level bool ``is_last``, or a non-dict container.
        InvalidArgumentError: ``directory`` exists, or no complete episode is stored.

    Example:
        >>> out = rc.datasets.to_rlds(buf, "data/cartpole_rlds")
        >>> ds = tfds.builder_from_directory(out.path).as_dataset(split="train")
    """
    directory = Path(directory)
    flat = FlatSpec(buf.data_spec)
    require_rlds_spec(flat, ("is_last",), "to_rlds")
    features_spec = features_from_spec(buf.data_spec)
    if directory.exists():
        raise InvalidArgumentError(
            f"to_rlds: {directory} exists; give a new directory (nothing was written)."
        )
    episodes, skipped = _stored_episodes(buf)
    if not episodes:
        raise InvalidArgumentError(
            f"to_rlds: the buffer holds no complete episode ({skipped} partial); an episode "
            "needs its is_first (or a preceding is_last) and its is_last step stored."
        )
    tfds = _import("tensorflow_datasets")
    features = tfds.features.FeaturesDict({"steps": tfds.features.Dataset(features_spec)})
    examples = ((i, {"steps": ep}) for i, ep in enumerate(episodes))
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        builder = tfds.dataset_builders.store_as_tfds_dataset(
            name, version, features, {"train": examples}, data_dir=tmp, disable_shuffling=True
        )
        os.replace(builder.data_dir, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    steps = sum(len(ep["is_last"]) for ep in episodes)
    return RldsExport(directory, len(episodes), steps, skipped)


def _step_spec(tf: Any, element_spec: Any) -> tuple[Any, bool]:
    """The spec of one step, and whether ``steps`` is a nested ``tf.data.Dataset``."""
    steps = element_spec["steps"]
    if isinstance(steps, tf.data.DatasetSpec):
        return steps.element_spec, True
    tree = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), steps)
    return tree, False


def _normalize(tf: Any, spec: Any) -> FlatSpec:
    def leaf(s: Any) -> Any:
        if s.dtype == tf.string:
            raise SpecError(
                f"from_rlds: a step field is a tf.string ({s}); replay storage holds numbers. "
                "Drop or encode it with episodes.map(...) first."
            )
        return s

    return FlatSpec(tf.nest.map_structure(leaf, spec))


def from_rlds(
    episodes: Any,
    capacity: int | None = None,
    num_envs: int = 1,
    *,
    data_spec: Any = None,
    **buffer_kwargs: Any,
) -> ReplayBuffer:
    """Loads a ``tf.data.Dataset`` of RLDS episodes into a new :class:`~recollect.ReplayBuffer`.

    Every step field becomes a leaf; episode-level fields other than
    ``steps`` are ignored. ``steps`` may be a nested ``tf.data.Dataset`` (the
    RLDS / TFDS form) or tensors with a leading time axis. Rows are filled
    with whole episodes as in :func:`~recollect.datasets.from_minari`
    (newest episodes kept when they exceed ``capacity``; lockstep rows when
    ``num_envs > 1``).

    Args:
        episodes: ``tf.data.Dataset`` of episode dicts with ``steps``.
        capacity: total steps; None: exactly what is loaded.
        num_envs: buffer rows.
        data_spec: the buffer's spec, a dict of some of the step fields (the
            others are dropped); default: the steps' element spec.
        **buffer_kwargs: passed to :class:`~recollect.ReplayBuffer`.

    Raises:
        SpecError: no top-level bool ``is_last`` step field, a string field,
            or a field of unknown shape.
        InvalidArgumentError: bad ``capacity``/``num_envs``, no episode fits a
            row, or fewer episodes than rows.

    Example:
        >>> ds = tfds.builder_from_directory(path).as_dataset(split="train")
        >>> buf = rc.datasets.from_rlds(ds, capacity=1_000_000, rng=0)
    """
    max_length = row_length(capacity, num_envs)
    tf = _import("tensorflow")
    step_spec, nested = _step_spec(tf, episodes.element_spec)
    flat = FlatSpec(data_spec) if data_spec is not None else _normalize(tf, step_spec)
    require_rlds_spec(flat, ("is_last",), "from_rlds")
    if nested:
        episodes = episodes.map(lambda e: e["steps"].batch(_MAX_STEPS).get_single_element())
    else:
        episodes = episodes.map(lambda e: e["steps"])
    keys = list(flat.spec)
    loaded = [flat.flatten({key: ep[key] for key in keys}) for ep in episodes.as_numpy_iterator()]
    lengths = np.fromiter((len(leaves[0]) for leaves in loaded), np.int64, len(loaded))
    plan = plan_rows(lengths, num_envs, max_length)
    rows = [[loaded[i] for i in row] for row in plan]
    return write_rows(flat, rows, capacity, **buffer_kwargs)
