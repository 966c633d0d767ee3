"""Minari datasets: export a buffer's complete episodes, import episodes into a buffer.

Needs ``pip install 'recollect[minari]'`` (minari, h5py, gymnasium). Minari
is imported when a function runs, never by ``import recollect``.

A Minari episode of ``L`` actions holds ``L + 1`` observations; a buffer holds
it as ``L + 1`` RLDS steps (see :mod:`recollect.datasets.episodes`).
Terminations and truncations stay apart: a terminated episode's last step
has ``is_terminal``, a truncated one's does not.
"""

from __future__ import annotations

import inspect
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recollect.buffers import ReplayBuffer
from recollect.datasets.episodes import (
    RLDS_KEYS,
    Transitions,
    _stored_episodes,
    require_rlds_spec,
    rlds_from_transitions,
    transitions_from_rlds,
)
from recollect.datasets.filling import plan_rows, row_length, write_rows
from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import ArraySpec, FlatSpec, spec_from_space

__all__ = ["MinariExport", "from_minari", "space_from_spec", "to_minari"]

_EXPORT_KEYS = ("observation", "action", "reward", "is_last", "is_terminal")


def _minari() -> Any:
    try:
        import minari
    except ImportError as err:
        raise ImportError(
            f"recollect.datasets needs minari for Minari datasets ({err}); "
            "pip install 'recollect[minari]'."
        ) from err
    return minari


@dataclass(frozen=True)
class MinariExport:
    """What :func:`to_minari` wrote.

    Attributes:
        dataset: the ``minari.MinariDataset``.
        episodes: complete episodes written.
        steps: transitions written (Minari steps: actions, not observations).
        skipped: episode parts left out: cut by the ring, still running, or
            a lone final step (no transition).
    """

    dataset: Any
    episodes: int
    steps: int
    skipped: int


def space_from_spec(spec: Any) -> Any:
    """A gymnasium space holding every value a spec allows (for datasets without an env).

    Float leaves become ``Box(-inf, inf)``, integer leaves ``Box`` over the
    dtype's range, bool leaves ``Box(0, 1, bool)``; dicts become ``Dict``,
    tuples and lists ``Tuple``.

    Raises:
        SpecError: a leaf dtype has no Box (complex, datetime).
    """
    from gymnasium import spaces

    if isinstance(spec, ArraySpec):
        dtype = spec.dtype
        if np.issubdtype(dtype, np.floating):
            return spaces.Box(-np.inf, np.inf, spec.shape, dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return spaces.Box(info.min, info.max, spec.shape, dtype)
        if dtype == np.bool_:
            return spaces.Box(False, True, spec.shape, dtype)
        raise SpecError(f"no gymnasium Box for dtype {dtype}; pass observation_space=...")
    if hasattr(spec, "keys"):
        return spaces.Dict({key: space_from_spec(spec[key]) for key in spec})
    return spaces.Tuple(tuple(space_from_spec(sub) for sub in spec))


def _tuples(tree: Any) -> Any:
    """Minari stores dict and tuple nests; lists and namedtuples become tuples."""
    if isinstance(tree, dict):
        return {key: _tuples(value) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return tuple(_tuples(value) for value in tree)
    return tree


def check_dataset_id(dataset_id: Any) -> str:
    """``dataset_id`` when it is a Minari dataset id with a version,
    ``(namespace/)name-vN`` (Minari's own pattern), else InvalidArgumentError.

    Minari's ``create_dataset_from_buffers`` creates the dataset's directory before
    it parses the id, and an id without ``-vN`` fails there with a ``TypeError``.
    """
    from minari.dataset.minari_dataset import DATASET_ID_RE

    match = DATASET_ID_RE.fullmatch(dataset_id) if isinstance(dataset_id, str) else None
    if match is None or match.group("version") is None:
        raise InvalidArgumentError(
            f"Minari dataset ids have the form (namespace/)name-vN, e.g. "
            f"'cartpole/random-v0'; got {dataset_id!r}. Add a version such as "
            f"'{dataset_id}-v0'."
        )
    return dataset_id


def to_minari(buf: ReplayBuffer, dataset_id: str, env: Any = None, **metadata: Any) -> MinariExport:
    """Writes the complete episodes stored in ``buf`` as a Minari dataset.

    Uses Minari's own ``minari.create_dataset_from_buffers``, so the layout,
    spaces and metadata are Minari's. Episodes are written row by row, oldest
    first. Image observations are stored raw (``jpeg_encoding=False``, lossless)
    unless ``jpeg_encoding=True`` is passed.

    Args:
        buf: an RLDS-step buffer: top-level ``observation, action, reward,
            is_last, is_terminal`` (``is_first`` recommended: without it the
            first episode of each row counts as cut).
        dataset_id: e.g. ``"cartpole/random-v0"``; written under
            ``MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``).
        env: gymnasium env, env id or ``EnvSpec`` the data came from; its
            spaces are used. Without it the spaces come from the spec (see
            :func:`space_from_spec`) unless ``observation_space=``/``action_space=``
            are given.
        **metadata: passed to ``create_dataset_from_buffers`` (``author``,
            ``algorithm_name``, ``description``, ``data_format``, ...).

    Returns:
        :class:`MinariExport`; ``skipped`` counts the episode parts left out.

    Raises:
        SpecError: the spec lacks an RLDS key.
        InvalidArgumentError: ``dataset_id`` is not ``(namespace/)name-vN``, or the
            buffer holds no complete episode; nothing is written.
        ValueError: from Minari (e.g. the dataset id exists already); a dataset
            directory this call created is removed.

    Example:
        >>> out = rc.datasets.to_minari(buf, "cartpole/random-v0", env="CartPole-v1")
        >>> minari.load_dataset("cartpole/random-v0").total_episodes == out.episodes
        True
    """
    minari = _minari()
    from minari.data_collector import EpisodeBuffer
    from minari.storage import get_dataset_path

    check_dataset_id(dataset_id)  # before Minari creates anything

    flat = FlatSpec(buf.data_spec)
    require_rlds_spec(flat, _EXPORT_KEYS, "to_minari")
    episodes, skipped = _stored_episodes(buf)
    lone = sum(len(ep["is_last"]) < 2 for ep in episodes)
    buffers = []
    for ep in episodes:
        if len(ep["is_last"]) < 2:
            continue
        tr = transitions_from_rlds(ep)
        buffers.append(
            EpisodeBuffer(
                observations=_tuples(tr.observations),
                actions=_tuples(tr.actions),
                rewards=tr.rewards,
                terminations=tr.terminations,
                truncations=tr.truncations,
            )
        )
    if not buffers:
        raise InvalidArgumentError(
            f"to_minari: the buffer holds no complete episode ({skipped + lone} partial); an "
            "episode needs its is_first (or a preceding is_last) and its is_last step stored."
        )
    if env is None:
        metadata.setdefault("observation_space", space_from_spec(buf.data_spec["observation"]))
        metadata.setdefault("action_space", space_from_spec(buf.data_spec["action"]))
    params = inspect.signature(minari.create_dataset_from_buffers).parameters
    if "jpeg_encoding" in params:
        metadata.setdefault("jpeg_encoding", False)
    target = Path(get_dataset_path(dataset_id))
    existed = target.exists()
    try:
        dataset = minari.create_dataset_from_buffers(dataset_id, buffers, env=env, **metadata)
    except BaseException:
        if not existed:  # nothing half-written stays behind (a retry would say "exists")
            shutil.rmtree(target, ignore_errors=True)
        raise
    steps = sum(len(b.rewards) for b in buffers)
    return MinariExport(dataset, len(buffers), steps, skipped + lone)


def _rlds_spec(dataset: Any, reward_dtype: Any) -> dict[str, Any]:
    return {
        "observation": spec_from_space(dataset.observation_space),
        "action": spec_from_space(dataset.action_space),
        "reward": ArraySpec((), reward_dtype),
        "discount": ArraySpec((), np.float32),
        "is_first": ArraySpec((), np.bool_),
        "is_last": ArraySpec((), np.bool_),
        "is_terminal": ArraySpec((), np.bool_),
    }


def _user_spec(data_spec: Any) -> FlatSpec:
    flat = FlatSpec(data_spec)
    require_rlds_spec(flat, ("observation", "action", "is_last"), "from_minari data_spec")
    extra = sorted(set(flat.spec) - set(RLDS_KEYS))
    if extra:
        raise SpecError(
            f"from_minari data_spec: top-level keys {extra} are not RLDS step keys "
            f"{list(RLDS_KEYS)}; a Minari dataset has nothing to fill them with."
        )
    return flat


def _read(dataset: Any, indices: np.ndarray, flat: FlatSpec | None) -> tuple[FlatSpec, list]:
    """Reads episodes ``indices`` as RLDS steps; returns the spec and each episode's leaves."""
    loaded: list[list[Any]] = []
    for ep in dataset.iterate_episodes(indices):
        if flat is None:
            flat = FlatSpec(_rlds_spec(dataset, np.asarray(ep.rewards).dtype))
        tr = Transitions(ep.observations, ep.actions, ep.rewards, ep.terminations, ep.truncations)
        discount = flat.spec["discount"].dtype if "discount" in flat.spec else np.float32
        steps = rlds_from_transitions(tr, discount)
        loaded.append(flat.flatten({key: steps[key] for key in flat.spec}))
    return flat or FlatSpec(_rlds_spec(dataset, np.float32)), loaded


def from_minari(
    dataset_or_id: Any,
    capacity: int | None = None,
    num_envs: int = 1,
    *,
    data_spec: Any = None,
    download: bool = False,
    **buffer_kwargs: Any,
) -> ReplayBuffer:
    """Loads a Minari dataset's episodes into a new RLDS-step :class:`~recollect.ReplayBuffer`.

    Each episode of ``L`` actions becomes ``L + 1`` steps ``observation,
    action, reward, discount, is_first, is_last, is_terminal``; the last step
    holds the final observation, a zero action and reward, ``is_last``, and
    ``is_terminal`` when the episode terminated (not when truncated).
    ``discount`` is 0 after a termination, else 1.

    Rows hold whole episodes. When the dataset exceeds ``capacity``, the newest
    episodes that fit are kept (as a ring would). With ``num_envs > 1`` episodes
    go to the least-filled row and rows are written in lockstep (``add_batch``):
    every row ends on an ``is_last`` step and keeps its newest ``T`` steps,
    ``T`` the smallest row total, so a row may start inside an episode and up
    to about one episode per row is left out.

    Args:
        dataset_or_id: a ``minari.MinariDataset`` or a local dataset id.
        capacity: total steps of the buffer; None: exactly what is loaded.
        num_envs: buffer rows.
        data_spec: the buffer's spec, a dict of RLDS keys (a subset holding
            ``observation, action, is_last``); default: all seven, from the
            dataset's spaces (``spec_from_space``), the reward's stored dtype
            and a float32 discount. Values are cast into it only when safe.
        download: fetch a dataset id missing under ``MINARI_DATASETS_PATH`` from
            Minari's remote hub first (``minari.load_dataset(id, download=True)``).
        **buffer_kwargs: passed to :class:`~recollect.ReplayBuffer` (``rng``,
            ``sampler``, ``sequence_length``, ``storage``, ...).

    Raises:
        InvalidArgumentError: bad ``capacity``/``num_envs``, no episode fits a
            row, or fewer episodes than rows.
        SpecError: ``data_spec`` is not a dict of RLDS keys.
        ShapeError, DTypeError, CastError: the data does not fit ``data_spec``.

    Example:
        >>> buf = rc.datasets.from_minari("cartpole/random-v0", capacity=100_000, rng=0)
        >>> buf.sample(256, num_steps=2)  # transitions, never across an episode end
    """
    max_length = row_length(capacity, num_envs)
    minari = _minari()
    dataset = (
        minari.load_dataset(dataset_or_id, download=download)
        if isinstance(dataset_or_id, str)
        else dataset_or_id
    )
    indices = np.asarray(dataset.episode_indices)
    flat = None if data_spec is None else _user_spec(data_spec)
    if max_length is None:  # everything fits: read once, lengths from the data
        flat, loaded = _read(dataset, indices, flat)
        plan = plan_rows([len(leaves[0]) for leaves in loaded], num_envs, None)
        rows = [[loaded[i] for i in row] for row in plan]
    else:  # lengths from Minari's episode metadata; read only the episodes that fit
        metas = dataset.storage.get_episode_metadata(indices.tolist())
        lengths = np.fromiter((m["total_steps"] + 1 for m in metas), np.int64, len(indices))
        plan = plan_rows(lengths, num_envs, max_length)
        needed = sorted(i for row in plan for i in row)
        flat, read = _read(dataset, indices[needed], flat)
        by_index = dict(zip(needed, read, strict=True))
        rows = [[by_index[i] for i in row] for row in plan]
    return write_rows(flat, rows, capacity, **buffer_kwargs)
