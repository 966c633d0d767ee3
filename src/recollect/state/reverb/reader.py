"""Reading a dm-reverb 0.14 checkpoint directory into plain Python and numpy values.

Reverb's ``DefaultCheckpointer(path)`` writes each checkpoint to ``path/<timestamp>/``
(``tables.tfrecord``, ``items.tfrecord``, ``chunks.tfrecord``; ZLIB-compressed TFRecord
files of ``PriorityTableCheckpoint``, ``PrioritizedItem`` and ``ChunkData`` messages) and
an empty ``DONE`` file last; a load takes the last directory, in name order, holding
``DONE``. :func:`read_checkpoint` does the same, without TensorFlow.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.state.reverb.chunks import TensorDecodeError, decode_chunk_tensor
from recollect.state.reverb.signature import (
    ReverbTensorSpec,
    decode_signature,
    flatten_signature,
    map_signature,
    unflatten_signature,
)
from recollect.state.reverb.tfrecord import read_records

__all__ = [
    "RateLimiterState",
    "ReverbCheckpoint",
    "ReverbItem",
    "ReverbTable",
    "SelectorOptions",
    "find_checkpoint",
    "read_checkpoint",
]

TABLES, ITEMS, CHUNKS, DONE = "tables.tfrecord", "items.tfrecord", "chunks.tfrecord", "DONE"
_FIX = "Restore the directory from a good copy, or load an earlier checkpoint."


@dataclasses.dataclass(frozen=True)
class SelectorOptions:
    """A table's sampler or remover, as ``reverb.selectors`` names it.

    Attributes:
        kind: ``"Fifo"``, ``"Lifo"``, ``"Uniform"``, ``"Prioritized"``, ``"MinHeap"`` or
            ``"MaxHeap"``.
        priority_exponent: ``Prioritized``'s exponent, else None.
        is_deterministic: what Reverb recorded (True for Fifo, Lifo and the heaps).
    """

    kind: str
    priority_exponent: float | None = None
    is_deterministic: bool = False


@dataclasses.dataclass(frozen=True)
class RateLimiterState:
    """A table's rate limiter: its configuration and its counters at checkpoint time."""

    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    insert_count: int
    sample_count: int
    delete_count: int


@dataclasses.dataclass(frozen=True, eq=False)
class ReverbItem:
    """One item of a table.

    Attributes:
        key: the item's uint64 key, as a Python int.
        priority: its priority (float64).
        times_sampled: how often it had been sampled when the checkpoint was made.
        inserted_at_ns: insertion time, nanoseconds since the Unix epoch.
        data: one array per column (the signature's leaves in ``tf.nest.flatten`` order):
            ``[num_steps, *step_shape]``, or ``step_shape`` for a squeezed column; string
            columns are object arrays of ``bytes``.
        episode_id: the episode every column's steps come from, when they are one
            unbroken run of steps of one episode and all columns agree (as for TF-Agents'
            observers' windows), else None.
        first_step: the index within that episode of the item's first step, else None.
        episode_ids: every episode the item's chunks belong to (sorted).
    """

    key: int
    priority: float
    times_sampled: int
    inserted_at_ns: int
    data: list[np.ndarray]
    episode_id: int | None = None
    first_step: int | None = None
    episode_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class ReverbTable:
    """One table of a checkpoint: its definition, counters and items (insertion order).

    Attributes:
        name: the table's name.
        sampler: how items are sampled.
        remover: how items are removed when the table is full.
        max_size: the table's capacity in items.
        max_times_sampled: samples after which an item is removed (0 or less: never).
        rate_limiter: configuration and counters.
        num_deleted_episodes: episodes whose every item has been removed.
        num_unique_samples: distinct items sampled since the last reset.
        signature: a nest of :class:`ReverbTensorSpec` (None when the table has none).
        items: the items, oldest first.
    """

    name: str
    sampler: SelectorOptions
    remover: SelectorOptions
    max_size: int
    max_times_sampled: int
    rate_limiter: RateLimiterState
    num_deleted_episodes: int
    num_unique_samples: int
    signature: Any
    items: list[ReverbItem]

    def flat_signature(self) -> list[ReverbTensorSpec]:
        """The signature's leaves in column order ([] without a signature)."""
        return [] if self.signature is None else flatten_signature(self.signature)

    @property
    def num_episodes(self) -> int:
        """Episodes the items refer to (what Reverb's ``server_info`` reports after a load)."""
        return len({e for item in self.items for e in item.episode_ids})

    def step_spec(self) -> Any:
        """The signature as a nest of :class:`~recollect.specs.ArraySpec` of ONE step.

        Every leaf loses its leading (time) dimension and keeps its name; bounds are
        dropped (``ArraySpec`` has none; they stay on :attr:`signature`).

        Raises:
            SpecError: the table has no signature, or a leaf has no leading dimension,
                another unknown dimension, or the ``string`` dtype.
        """
        from recollect.errors import SpecError

        if self.signature is None:
            raise SpecError(f"Reverb table {self.name!r} has no signature, so no step spec.")

        def leaf(spec: ReverbTensorSpec) -> Any:
            if spec.dtype == object:
                raise SpecError(
                    f"column {spec.name!r} holds strings (recollect stores fixed-size dtypes)"
                )
            if not spec.shape:
                raise SpecError(f"column {spec.name!r} has no time dimension (shape {spec.shape})")
            return spec.array_spec(drop_leading=True)

        return map_signature(leaf, self.signature)

    def unflatten(self, item: ReverbItem) -> Any:
        """``item.data`` in the signature's structure (the flat list without a signature)."""
        if self.signature is None:
            return list(item.data)
        return unflatten_signature(self.signature, list(item.data))


@dataclasses.dataclass(frozen=True, eq=False)
class ReverbCheckpoint:
    """A Reverb checkpoint read back.

    Attributes:
        path: the checkpoint's own directory (``<root>/<timestamp>``).
        tables: the tables, in the order of ``tables.tfrecord``.
    """

    path: Path
    tables: list[ReverbTable]

    def table(self, name: str) -> ReverbTable:
        """The table called ``name``.

        Raises:
            CheckpointError: no table has that name (the message lists those there are).
        """
        for table in self.tables:
            if table.name == name:
                return table
        names = [t.name for t in self.tables]
        raise CheckpointError(f"{self.path}: no table {name!r} in the checkpoint; it has {names}.")


def find_checkpoint(path: str | Path) -> Path | None:
    """The checkpoint directory Reverb would load from ``path``, or None.

    ``path`` may be a checkpointer's root (the last ``<timestamp>`` subdirectory in name
    order that holds ``DONE`` is chosen, as Reverb does) or one checkpoint directory.
    """
    root = Path(path)
    if (root / DONE).is_file() and (root / TABLES).is_file():
        return root
    if not root.is_dir():
        return None
    candidates = sorted(p for p in root.iterdir() if p.is_dir())
    for candidate in reversed(candidates):
        if (candidate / DONE).exists():
            return candidate
    return None


def _unknown_fields(message: Any) -> int:
    try:
        from google.protobuf import unknown_fields

        return len(unknown_fields.UnknownFieldSet(message))
    except ImportError:  # pragma: no cover - protobuf < 4.21
        return len(message.UnknownFields())


def _parse(cls: Any, record: bytes, path: Path, index: int, what: str) -> Any:
    from google.protobuf.message import DecodeError

    try:
        message = cls.FromString(record)
    except DecodeError as err:
        raise CheckpointError(
            f"{path}: record {index} is not a valid {what} message ({err}). {_FIX}"
        ) from err
    if _unknown_fields(message):
        raise CheckpointError(
            f"{path}: record {index} is not a {what} message (it holds fields that message "
            f"does not have); the file is damaged or is another file renamed. {_FIX}"
        )
    return message


def _selector(options: Any, path: Path, table: str, role: str) -> SelectorOptions:
    kind = options.WhichOneof("distribution")
    det = bool(options.is_deterministic)
    if kind == "prioritized":
        exponent = float(options.prioritized.priority_exponent)
        return SelectorOptions("Prioritized", exponent, det)
    if kind == "heap":
        return SelectorOptions("MinHeap" if options.heap.min_heap else "MaxHeap", None, det)
    if kind in ("fifo", "lifo", "uniform"):
        return SelectorOptions(kind.capitalize(), None, det)
    raise CheckpointError(
        f"{path}: table {table!r} has no {role} set (a PriorityTableCheckpoint always has "
        f"one). {_FIX}"
    )


class _Chunks:
    """``chunks.tfrecord``'s chunks by key, each tensor decoded once when first used."""

    def __init__(self, path: Path, messages: dict[str, Any]) -> None:
        self.path = path
        self.protos: dict[int, tuple[int, Any]] = {}
        for index, record in enumerate(read_records(path)):
            chunk = _parse(messages["ChunkData"], record, path, index, "deepmind.reverb.ChunkData")
            if not chunk.data.tensors:
                raise CheckpointError(
                    f"{path}: record {index} (chunk {chunk.chunk_key}) holds no tensor. {_FIX}"
                )
            self.protos[int(chunk.chunk_key)] = (index, chunk)
        self.decoded: dict[tuple[int, int], np.ndarray] = {}

    def tensor(self, key: int, index: int, where: str) -> np.ndarray:
        got = self.decoded.get((key, index))
        if got is not None:
            return got
        if key not in self.protos:
            raise CheckpointError(
                f"{where} refers to chunk {key}, which {self.path} does not hold. {_FIX}"
            )
        record, chunk = self.protos[key]
        tensors = chunk.data.tensors
        if not 0 <= index < len(tensors):
            raise CheckpointError(
                f"{where} asks for tensor {index} of chunk {key} ({self.path}, record "
                f"{record}), which holds {len(tensors)}. {_FIX}"
            )
        try:
            array = decode_chunk_tensor(tensors[index], bool(chunk.delta_encoded))
        except TensorDecodeError as err:
            raise CheckpointError(
                f"{self.path}: record {record} (chunk {key}): {err}. {_FIX}"
            ) from err
        if array.ndim == 0:
            raise CheckpointError(
                f"{self.path}: record {record} (chunk {key}) holds a scalar, not a [steps, ...] "
                f"tensor. {_FIX}"
            )
        self.decoded[(key, index)] = array
        return array

    def episode(self, key: int) -> int | None:
        """The episode id of chunk ``key`` (None when it has no sequence range)."""
        _, chunk = self.protos[key]
        if not chunk.HasField("sequence_range"):
            return None
        return int(chunk.sequence_range.episode_id)

    def first_step(self, key: int) -> tuple[int, int] | None:
        """(episode id, step index of the chunk's row 0), or None for a sparse chunk."""
        _, chunk = self.protos[key]
        if not chunk.HasField("sequence_range") or chunk.sequence_range.sparse:
            return None
        return int(chunk.sequence_range.episode_id), int(chunk.sequence_range.start)


def _run(chunks: _Chunks, column: Any) -> tuple[int, int] | None:
    """(episode id, first step) when the column's slices are one run of consecutive steps."""
    run, following = None, None
    for piece in column.chunk_slices:
        start = chunks.first_step(int(piece.chunk_key))
        if start is None:
            return None
        episode, step = start[0], start[1] + int(piece.offset)
        if run is None:
            run = (episode, step)
        elif (episode, step) != following:
            return None
        following = (episode, step + int(piece.length))
    return run


def _column(chunks: _Chunks, column: Any, where: str) -> np.ndarray:
    parts = []
    for piece in column.chunk_slices:
        tensor = chunks.tensor(int(piece.chunk_key), int(piece.index), where)
        start, length = int(piece.offset), int(piece.length)
        if start < 0 or length < 0 or start + length > tensor.shape[0]:
            raise CheckpointError(
                f"{where} slices steps [{start}, {start + length}) of chunk "
                f"{piece.chunk_key}, which holds {tensor.shape[0]} ({chunks.path}). {_FIX}"
            )
        parts.append(tensor[start : start + length])
    if not parts:
        raise CheckpointError(f"{where} has no chunk slices. {_FIX}")
    data = parts[0].copy() if len(parts) == 1 else np.concatenate(parts, axis=0)
    if column.squeeze:
        if data.shape[0] != 1:
            raise CheckpointError(f"{where} is squeezed but spans {data.shape[0]} steps. {_FIX}")
        data = data.reshape(data.shape[1:])  # an array even for one string
    return data


def _item(message: Any, chunks: _Chunks, specs: list[ReverbTensorSpec], where: str) -> ReverbItem:
    columns = message.flat_trajectory.columns
    if specs and len(columns) != len(specs):
        raise CheckpointError(
            f"{where} has {len(columns)} columns, the table's signature {len(specs)}. {_FIX}"
        )
    data = []
    runs = set()
    for c, column in enumerate(columns):
        array = _column(chunks, column, f"{where}, column {c}")
        if specs and array.dtype != specs[c].dtype:
            raise CheckpointError(
                f"{where}, column {c} holds {array.dtype}, its signature "
                f"{specs[c].name or c!r} says {specs[c].dtype}. {_FIX}"
            )
        data.append(array)
        runs.add(None if column.squeeze else _run(chunks, column))
    run = runs.pop() if len(runs) == 1 else None
    keys = {int(p.chunk_key) for column in columns for p in column.chunk_slices}
    episodes = {chunks.episode(key) for key in keys}
    stamp = message.inserted_at
    return ReverbItem(
        key=int(message.key),
        priority=float(message.priority),
        times_sampled=int(message.times_sampled),
        inserted_at_ns=int(stamp.seconds) * 1_000_000_000 + int(stamp.nanos),
        data=data,
        episode_id=None if run is None else run[0],
        first_step=None if run is None else run[1],
        episode_ids=tuple(sorted(e for e in episodes if e is not None)),
    )


def _table(message: Any, path: Path) -> tuple[ReverbTable, list[ReverbTensorSpec]]:
    name = message.table_name
    if not name:
        raise CheckpointError(f"{path}: a table record has no table name. {_FIX}")
    signature = None
    if message.HasField("signature"):
        try:
            signature = decode_signature(message.signature)
        except TensorDecodeError as err:
            raise CheckpointError(f"{path}: table {name!r}'s signature: {err}. {_FIX}") from err
    rl = message.rate_limiter
    table = ReverbTable(
        name=name,
        sampler=_selector(message.sampler, path, name, "sampler"),
        remover=_selector(message.remover, path, name, "remover"),
        max_size=int(message.max_size),
        max_times_sampled=int(message.max_times_sampled),
        rate_limiter=RateLimiterState(
            samples_per_insert=float(rl.samples_per_insert),
            min_diff=float(rl.min_diff),
            max_diff=float(rl.max_diff),
            min_size_to_sample=int(rl.min_size_to_sample),
            insert_count=int(rl.insert_count),
            sample_count=int(rl.sample_count),
            delete_count=int(rl.delete_count),
        ),
        num_deleted_episodes=int(message.num_deleted_episodes),
        num_unique_samples=int(message.num_unique_samples),
        signature=signature,
        items=[],
    )
    return table, (flatten_signature(signature) if signature is not None else [])


def read_checkpoint(path: str | Path) -> ReverbCheckpoint:
    """Reads the checkpoint that dm-reverb 0.14 would load from ``path``.

    Args:
        path: a ``DefaultCheckpointer`` root (its latest ``<timestamp>`` directory holding
            ``DONE`` is read, as Reverb does) or one checkpoint directory.

    Returns:
        Every table with its definition, counters, signature and items; each item's data
        as one numpy array per column, bit-exact.

    Raises:
        CheckpointError: no complete checkpoint (with ``DONE``) is there; a file is missing,
            truncated, fails a CRC check, or does not hold the messages it should; an item
            refers to a chunk that is absent or too short; the message names the file.
        MissingExtraError: the ``protobuf`` package is not installed.
    """
    from recollect.state.reverb.protos import messages

    root = Path(path)
    directory = find_checkpoint(root)
    if directory is None:
        raise CheckpointError(
            f"{root}: no Reverb checkpoint here (no directory holding {TABLES} and a {DONE} "
            "file; a checkpoint without DONE was not finished). Pass the directory given to "
            "DefaultCheckpointer(path=...) or one of its <timestamp> subdirectories."
        )
    protos = messages()
    for name in (TABLES, ITEMS, CHUNKS):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory / name}: missing from the checkpoint. {_FIX}")
    tables: dict[str, ReverbTable] = {}
    specs: dict[str, list[ReverbTensorSpec]] = {}
    legacy_items: list[tuple[Any, int]] = []
    tables_path = directory / TABLES
    for index, record in enumerate(read_records(tables_path)):
        message = _parse(
            protos["PriorityTableCheckpoint"],
            record,
            tables_path,
            index,
            "deepmind.reverb.PriorityTableCheckpoint",
        )
        table, flat = _table(message, tables_path)
        if table.name in tables:
            raise CheckpointError(f"{tables_path}: table {table.name!r} appears twice. {_FIX}")
        tables[table.name] = table
        specs[table.name] = flat
        legacy_items.extend((item, index) for item in message.deprecated_items)
    chunks = _Chunks(directory / CHUNKS, protos)
    items_path = directory / ITEMS
    records = [(m, f"{tables_path}: record {i}, an item") for m, i in legacy_items]
    for index, record in enumerate(read_records(items_path)):
        message = _parse(
            protos["PrioritizedItem"], record, items_path, index, "deepmind.reverb.PrioritizedItem"
        )
        records.append((message, f"{items_path}: record {index} (item {message.key})"))
    for message, where in records:
        table_of = tables.get(message.table)
        if table_of is None:
            raise CheckpointError(
                f"{where} belongs to table {message.table!r}, which {TABLES} does not define. "
                f"{_FIX}"
            )
        table_of.items.append(_item(message, chunks, specs[message.table], where))
    return ReverbCheckpoint(path=directory, tables=list(tables.values()))
