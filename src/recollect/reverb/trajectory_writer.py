"""``reverb.TrajectoryWriter``: append steps column by column, create items from history.

``append`` flattens a nest into columns (the structure may grow: a new field
gets a new column, earlier steps read None); ``history`` gives, per field, the
recent references, indexable like a list (int -> a squeezed one-step column,
slice or list of ints -> a column with a time axis). ``create_item`` queues an
item of :class:`TrajectoryColumn` s; ``flush`` and ``end_episode`` send it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import optree

from recollect.arguments import is_int, reverb_positive_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import signature as _signature
from recollect.reverb.errors import ReverbError
from recollect.reverb.stream import CellRef, StreamWriter, WriterStream


class TrajectoryColumn:
    """References of one column of an item (``squeeze``: exactly one, no time axis).

    Raises:
        InvalidArgumentError (a ValueError): ``squeeze`` with other than one reference,
            or a None reference (a step where the field was not given).
    """

    # refs: the column's data references, oldest first; span: (stream column, first step,
    # count) when they are consecutive steps of one column (history slices), else None
    __slots__ = ("is_squeezed", "refs", "span")

    def __init__(
        self,
        data_references: Sequence[CellRef | None],
        *,
        squeeze: bool = False,
        path: Any = None,
    ) -> None:
        refs = tuple(data_references)
        if squeeze and len(refs) != 1:
            raise InvalidArgumentError(
                "Columns must contain exactly one data reference when squeeze set, got "
                f"{len(refs)}."
            )
        if None in refs:  # CellRef has no __eq__: an identity test per reference
            raise InvalidArgumentError(
                "TrajectoryColumns cannot contain any None data references: TrajectoryColumn "
                f"at path {path} got {list(refs)}. (The field was not appended at "
                "every step of the slice.)"
            )
        self.refs = cast("tuple[CellRef, ...]", refs)  # None was refused above
        self.span: tuple[Any, int, int] | None = None
        self.is_squeezed = squeeze

    def __len__(self) -> int:
        return len(self.refs)

    def __iter__(self) -> Iterator[CellRef]:
        return iter(self.refs)

    def __getitem__(self, val: int | slice | list[int]) -> TrajectoryColumn:
        if is_int(val):
            ref = self.refs[val]
            return _column((ref,), True, (ref.owner, ref.step, 1))
        if isinstance(val, slice):
            refs = self.refs[val]
            span = self.span
            if span is not None and val.step in (None, 1) and refs:
                # consecutive references of one span are consecutive steps
                span = (span[0], refs[0].step, len(refs))
            else:
                span = None
            return _column(refs, False, span)
        if isinstance(val, list):
            return TrajectoryColumn([self.refs[x] for x in val])
        raise TypeError(f"TrajectoryColumn indices must be integers or slices, not {type(val)}")

    @property
    def shape(self) -> tuple[int | None, ...]:
        if self.is_squeezed:
            return tuple(self.refs[0].shape)
        return (len(self.refs), *self.refs[0].shape)

    @property
    def dtype(self) -> np.dtype:
        return self.refs[0].dtype

    def numpy(self) -> np.ndarray:
        """The referenced values stacked (squeezed: the one value).

        Raises:
            RuntimeError: a reference has expired.
        """
        if any(ref.expired for ref in self.refs):
            raise ReverbError(
                "Cannot convert TrajectoryColumn with expired data references to numpy array."
            )
        if self.is_squeezed:
            return self.refs[0].numpy()
        return np.stack([ref.numpy() for ref in self.refs])


def _column(
    refs: tuple[CellRef, ...], squeeze: bool, span: tuple[Any, int, int] | None = None
) -> TrajectoryColumn:
    """A :class:`TrajectoryColumn` of references known to be valid (none None; one when
    ``squeeze``), built without the checks of its constructor. ``span``: ``(stream column,
    first step, count)`` when the references are consecutive steps of one stream column
    (a slice of one history), which lets ``create_item`` skip reading every reference."""
    column = object.__new__(TrajectoryColumn)
    column.refs = refs
    column.span = span
    column.is_squeezed = squeeze
    return column


class _ColumnHistory:
    """The recent references of one field, indexed as if the whole episode were kept."""

    def __init__(self, path: tuple, buffer_size: int, padding: int = 0) -> None:
        self._path = path
        self._size = buffer_size
        self._refs: list[CellRef | None] = [None] * min(buffer_size, padding)
        self._offset = padding - len(self._refs)

    def path(self) -> tuple:
        return self._path

    def append(self, ref: CellRef | None) -> None:
        refs = self._refs
        refs.append(ref)
        if len(refs) > self._size:
            del refs[0]
            self._offset += 1

    def reset(self) -> None:
        self._refs, self._offset = [], 0

    def resize(self, buffer_size: int) -> None:
        """Keeps the last ``buffer_size`` references from the next append on (``configure``)."""
        self._size = buffer_size

    def set_last(self, ref: CellRef) -> None:
        self._refs[-1] = ref

    @property
    def can_set_last(self) -> bool:
        return bool(self._refs) and self._refs[-1] is None

    def __len__(self) -> int:
        return len(self._refs) + self._offset

    def __iter__(self) -> Iterator[CellRef | None]:
        yield from itertools.repeat(None, self._offset)
        yield from self._refs

    def _one(self, i: int) -> CellRef | None:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("list index out of range")
        i -= self._offset
        return self._refs[i] if i >= 0 else None

    def __getitem__(self, val: int | slice | list[int]) -> TrajectoryColumn:
        if type(val) is slice and val.stop is None and val.step is None:
            start, history = val.start, self._refs
            if type(start) is int and -len(history) <= start < 0:  # [-n:], the common case
                last: list[Any] = history[start:]
                if None not in last:
                    head = last[0]
                    return _column(tuple(last), False, (head.owner, head.step, -start))
        if type(val) is slice:
            offset = self._offset
            start, stop, step = val.indices(len(self._refs) + offset)
            if step == 1 and start >= offset:  # every index inside the kept references
                refs = self._refs[start - offset : stop - offset]
                if refs and None not in refs:
                    # a history's non-None entries are consecutive steps of one column
                    kept = cast("list[CellRef]", refs)
                    first = kept[0]
                    return _column(tuple(kept), False, (first.owner, first.step, len(kept)))
        path = (*self._path, val)
        if is_int(val):
            return TrajectoryColumn([self._one(int(val))], squeeze=True, path=path)
        if isinstance(val, slice):
            start, stop, step = val.indices(len(self))
            return TrajectoryColumn([self._one(i) for i in range(start, stop, step)], path=path)
        if isinstance(val, list):
            return TrajectoryColumn([self._one(i) for i in val], path=path)
        raise TypeError(f"_ColumnHistory indices must be integers or slices, not {type(val)}")

    def __repr__(self) -> str:
        return f"_ColumnHistory(path={self._path}, refs={self._refs})"


def _path_text(path: tuple) -> str:
    return str(tuple(path))


_SAME: list[int] = []  # marks "leaf i is column i" (a sentinel, compared by identity)


class TrajectoryWriter(StreamWriter):
    """Writes steps and items to a server (made by ``Client.trajectory_writer``)."""

    def __init__(self, stream: WriterStream, signatures: Any = None) -> None:
        super().__init__(stream)
        self._signatures = signatures  # callable table name -> columns, or None
        self._expected: dict[str, Any] = {}  # its answers, by table
        self._structure: Any = None
        self._paths: dict[tuple, int] = {}
        self._columns: list[_ColumnHistory] = []
        self._configs: dict[tuple, int] = {}
        self._open = False
        self._history: Any = None  # the history nest, rebuilt when the structure grows
        # the last appended structure and its leaves' columns (_SAME: leaf i is column i)
        self._last_treedef: Any = None
        self._last_order: list[int] | None = None
        # the keys of the last step when it was a flat dict of leaves, in column order
        self._dict_keys: list[Any] | None = None
        self._item_keys: list[Any] | None = None  # the same, of the last item's trajectory
        self._item_types: list[type] = []

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None or not issubclass(exc_type, ReverbError):
            self.flush()

    @property
    def history(self) -> Any:
        """Per field (structured like the appended data), its :class:`_ColumnHistory`.

        Raises:
            RuntimeError: before the first ``append``.
        """
        if not self._columns:
            raise RuntimeError(
                "history cannot be accessed before `append` is called at least once."
            )
        if self._history is None:
            paths, _, treedef = optree.tree_flatten_with_path(self._structure, none_is_leaf=True)
            cols = [self._columns[self._paths[p]] for p in paths]
            self._history = optree.tree_unflatten(treedef, cols)
        return self._history

    @property
    def episode_steps(self) -> int:
        """Complete steps appended since the last ``end_episode``."""
        return self._stream.episode_steps

    @property
    def max_num_keep_alive_refs(self) -> int:
        return self._stream.max_num_keep_alive_refs

    def configure(
        self, path: tuple, *, num_keep_alive_refs: int, max_chunk_length: int | None
    ) -> None:
        """Overrides one column's ``num_keep_alive_refs`` (chunk lengths are accepted and
        ignored: data is stored uncompressed, once)."""
        reverb_positive_int("num_keep_alive_refs", num_keep_alive_refs)
        if max_chunk_length is not None and not 1 <= max_chunk_length <= num_keep_alive_refs:
            raise InvalidArgumentError(
                f"max_chunk_length ({max_chunk_length}) must be None or a positive integer <= "
                f"num_keep_alive_refs ({num_keep_alive_refs})"
            )
        if path in self._paths:
            self._stream.configure(self._paths[path], num_keep_alive_refs)
            self._columns[self._paths[path]].resize(num_keep_alive_refs)
        else:
            self._configs[path] = num_keep_alive_refs

    def _add_paths(self, data: Any) -> None:
        paths, _, _ = optree.tree_flatten_with_path(data, none_is_leaf=True)
        padding = len(self._columns[0]) if self._columns else 0
        for path in paths:
            if path in self._paths:
                continue
            index = len(self._columns)
            self._paths[path] = index
            keep = self._configs.get(path, self._stream.keep)
            if path in self._configs:
                self._stream.configure(index, keep)
            self._columns.append(_ColumnHistory(path, keep, padding))
        self._structure = _union(self._structure, data)
        self._history = None
        self._last_treedef = self._last_order = None
        self._dict_keys = None

    def _flat_by_column(self, data: Any, leaves: list[Any], treedef: Any) -> list[Any]:
        """``leaves`` placed at their columns (a new structure: its columns are found, new
        fields get columns, and the order is kept for the next step of this structure)."""
        paths = optree.treespec_paths(treedef)
        if any(p not in self._paths for p in paths) or self._structure is None:
            self._add_paths(data)
        order = [self._paths[path] for path in paths]
        self._last_treedef = treedef
        self._last_order = _SAME if order == list(range(len(self._columns))) else order
        if (
            type(data) is dict
            and self._last_order is _SAME
            and treedef.num_leaves == treedef.num_nodes - 1 == len(data)
        ):  # a flat dict of leaves: the next steps may take append's fast path
            self._dict_keys = [path[0] for path in paths]
        flat: list[Any] = [None] * len(self._columns)
        for index, leaf in zip(order, leaves, strict=True):
            flat[index] = leaf
        return flat

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends one step (``partial_step``: more fields of it follow in a later call).

        Raises:
            SpecError (a ValueError): a field whose dtype or shape differs from its first value
                ("Tensor of wrong dtype provided for column ('a',)...").
            InvalidArgumentError (a ValueError): a field given twice in one step.
        """
        keys = self._dict_keys
        if keys is not None and type(data) is dict and not (partial_step or self._open):
            if len(data) == len(keys):  # the fast path: the last step's flat dict of leaves
                try:
                    leaves = [data[k] for k in keys]
                except KeyError:
                    leaves = None
                whole = None if leaves is None else self._stream.append_whole(leaves)
                if whole is not None:
                    for column, cell in zip(self._columns, whole, strict=True):
                        column.append(cell)
                    return
        leaves, treedef = optree.tree_flatten(data, none_is_leaf=True)
        if treedef == self._last_treedef and self._last_order is not None:
            flat = leaves if self._last_order is _SAME else [None] * len(self._columns)
            if flat is not leaves:
                for index, leaf in zip(self._last_order, leaves, strict=True):
                    flat[index] = leaf
        else:
            flat = self._flat_by_column(data, leaves, treedef)
        if self._open:
            for i, (column, value) in enumerate(zip(self._columns, flat, strict=True)):
                if value is not None and not column.can_set_last:
                    raise InvalidArgumentError(
                        f"Field {self._columns[i].path()} has already been set in the active "
                        "step by previous (partial) append call and thus must be omitted or "
                        f"set to None but got: {value}"
                    )
        refs = self._append(flat, partial_step, self._column_name)
        if self._open:
            for column, ref in zip(self._columns, refs, strict=True):
                if ref is not None:
                    column.set_last(ref)
        else:
            for column, ref in zip(self._columns, refs, strict=True):
                column.append(ref)
        self._open = partial_step

    def _column_name(self, index: int) -> str:
        return _path_text(self._columns[index].path())

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        """Queues an item of ``trajectory`` (a nest of :class:`TrajectoryColumn`) for ``table``.

        Raises:
            TypeError: a leaf that is not a TrajectoryColumn.
            SpecError (a ValueError): the trajectory does not match the table's signature.
        """
        keys = self._item_keys
        flat = None
        if keys is not None and type(trajectory) is dict and len(trajectory) == len(keys):
            try:  # the last trajectory's flat dict: its leaves without optree
                flat = [trajectory[k] for k in keys]
            except KeyError:
                pass
            if flat is not None and list(map(type, flat)) != self._item_types:
                flat = None  # a nested or other leaf: flatten it
        if flat is None:
            flat = _signature.flatten(trajectory)
            self._item_keys = None
            if type(trajectory) is dict and len(flat) == len(trajectory):
                paths = optree.tree_paths(cast(Any, trajectory), none_is_leaf=True)
                self._item_keys = [path[0] for path in paths]
                self._item_types = [TrajectoryColumn] * len(flat)
        refs: list[tuple[CellRef, ...]] = []
        spans: list[tuple[Any, int, int]] | None = []
        squeeze: list[bool] = []
        for column in flat:
            if type(column) is not TrajectoryColumn and not isinstance(column, TrajectoryColumn):
                refs = []
                break
            refs.append(column.refs)
            squeeze.append(column.is_squeezed)
            if spans is not None:
                if column.span is None:
                    spans = None
                else:
                    spans.append(column.span)
        if not refs:
            raise TypeError(
                f"All leaves of `trajectory` must be `TrajectoryColumn` but got {trajectory}"
            )
        if self._signatures is not None:
            if table not in self._expected:
                self._expected[table] = self._signatures(table)
            expected = self._expected[table]
            if expected is not None:
                _signature.check_item(table, expected, [(c.dtype, c.shape) for c in flat])
        if spans is not None:
            self._stream.create_span_item(table, priority, spans, squeeze)
        else:
            self._stream.create_item(table, priority, refs, squeeze)

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Flushes, starts a new episode; ``clear_buffers`` also empties the history."""
        try:
            self._stream.end_episode(clear_buffers, timeout_ms)
        finally:
            if clear_buffers:
                for column in self._columns:
                    column.reset()
            self._open = False

    def close(self) -> None:
        """Sends what is queued and releases the writer's server-side state."""
        self._stream.close()


def _union(a: Any, b: Any) -> Any:
    """The structure holding every field of ``a`` and ``b`` (``a``'s order first)."""
    if a is None:
        return optree.tree_map(lambda _: None, b, none_is_leaf=True)
    if isinstance(a, dict):
        merged = dict(a)
        for k, v in b.items():
            merged[k] = _union(a[k], v) if k in a else _union(None, v)
        return type(a)(merged) if type(a) is not dict else merged
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return type(a)(*(_union(x, y) for x, y in zip(a, b, strict=False)))
    if isinstance(a, (list, tuple)):
        out = [
            _union(x, y) if x is not None or not _is_nest(y) else _union(None, y)
            for x, y in itertools.zip_longest(a, b)
        ]
        return type(a)(out)
    return a


def _is_nest(x: Any) -> bool:
    return isinstance(x, (dict, list, tuple))
