"""``reverb.Client``: insert, sample, update priorities, writers, server info.

A client talks to its server through a channel: the server object itself when
the address is one of this process's servers (``LocalChannel``, no socket),
else a ``recollect.grpc`` channel. A client is picklable (its address).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from recollect.arguments import reverb_positive_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import signature as _signature
from recollect.reverb.addresses import grpc_transport, local_core
from recollect.reverb.core import LocalChannel
from recollect.reverb.errors import DeadlineExceededError
from recollect.reverb.info import decode_info
from recollect.reverb.replay_sample import ReplaySample, SampleInfo
from recollect.reverb.reverb_types import TableInfo
from recollect.reverb.stream import WriterStream
from recollect.reverb.structured_writer import StructuredWriter
from recollect.reverb.trajectory_writer import TrajectoryColumn, TrajectoryWriter


def open_channel(address: str) -> Any:
    """The channel to ``address``: in-process when a server of this process has it."""
    core = local_core(address)
    if core is not None:
        return LocalChannel(core)
    rgrpc = grpc_transport()
    if rgrpc is None:
        return _Unreachable(address)
    return _MappedChannel(rgrpc.connect(address), rgrpc)


class _Unreachable:
    """The channel to an address no server of this process has, without a transport."""

    def __init__(self, address: str) -> None:
        self._address = address

    def call(self, method: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        raise DeadlineExceededError(
            f"{method} call did not complete within provided timeout of {timeout}s: no server "
            f"of this process listens at {self._address!r}, and the gRPC transport (to reach "
            "other processes) is not installed: pip install 'recollect[reverb]'."
        )


class _MappedChannel:
    """A gRPC channel whose transport timeouts raise Reverb's DeadlineExceededError."""

    def __init__(self, channel: Any, module: Any) -> None:
        self._channel = channel
        self._timeout_error = module.DeadlineExceededError

    def call(self, method: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        try:
            return self._channel.call(method, args, timeout)
        except self._timeout_error as err:
            raise DeadlineExceededError(
                f"{method} call did not complete within provided timeout of {timeout}s: {err}"
            ) from err


class Writer:
    """The legacy writer (``Client.writer``): whole steps; items of the last N steps."""

    def __init__(self, stream: WriterStream, max_sequence_length: int) -> None:
        self._stream = stream
        self._max = max_sequence_length
        self._closed = False
        self._width: int | None = None

    def __enter__(self) -> Writer:
        if self._closed:
            raise InvalidArgumentError("Cannot reuse already closed Writer")
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:
                pass

    def append(self, data: Any) -> None:
        """Appends one step (every leaf of ``data``)."""
        flat = _signature.flatten(data)
        if self._width is not None and len(flat) != self._width:
            raise InvalidArgumentError(
                f"every step must have {self._width} leaves (the first step's); got {len(flat)}."
            )
        self._width = len(flat)
        self._stream.append(flat, False)

    def append_sequence(self, sequence: Any) -> None:
        """Appends ``T`` steps given as a nest of ``[T, ...]`` arrays."""
        flat = [np.asarray(x) for x in _signature.flatten(sequence)]
        lengths = {len(x) for x in flat}
        if len(lengths) != 1:
            raise InvalidArgumentError(
                f"every leaf of the sequence must have the same leading dimension; got {lengths}."
            )
        for t in range(lengths.pop()):
            self.append([x[t] for x in flat])

    def create_item(self, table: str, num_timesteps: int, priority: float) -> None:
        """Queues an item of the last ``num_timesteps`` steps for ``table``.

        Raises:
            InvalidArgumentError (a ValueError): ``num_timesteps`` < 1 or more than kept.
        """
        reverb_positive_int("num_timesteps", num_timesteps)
        columns = self._stream.columns
        if not columns or num_timesteps > min(
            self._max, columns[0].next_step - columns[0].alive_from
        ):
            raise InvalidArgumentError(
                f"num_timesteps ({num_timesteps}) must be <= the steps available "
                f"({0 if not columns else columns[0].next_step - columns[0].alive_from}) and "
                f"<= max_sequence_length ({self._max})."
            )
        from recollect.reverb.stream import CellRef

        refs = [
            [CellRef(c, s, None) for s in range(c.next_step - num_timesteps, c.next_step)]
            for c in columns
        ]
        self._stream.create_item(table, priority, refs, [False] * len(columns), per_step=True)

    def flush(self) -> None:
        """Sends queued items (blocks on rate limiters)."""
        self._stream.flush(0, None)

    def close(self, retry_on_unavailable: bool = True) -> None:
        """Sends queued items and closes the writer.

        Raises:
            InvalidArgumentError: called twice.
        """
        if self._closed:
            raise InvalidArgumentError("close() has already been called on Writer.")
        self._closed = True
        self._stream.end_episode(True, None)
        self._stream.close()


def _unstack(col: np.ndarray) -> list[np.ndarray]:
    """``[col[0], col[1], ...]`` as arrays (a 1-d column gives 0-d arrays of its dtype)."""
    if col.ndim > 1:
        return list(col)  # views
    if col.dtype.kind == "O":  # its items are bytes objects: keep the object dtype
        return [np.asarray(x, col.dtype) for x in col]
    return list(map(np.asarray, col))


_new_tuple = tuple.__new__  # tuple.__new__(NamedTupleClass, values): a named tuple, in C


def _per_sample(groups: list[dict[str, Any]], k: int) -> Iterator[list[np.ndarray]]:
    """The sampled batch's column groups split into ``k`` per-sample lists of arrays (views
    of the batch arrays; a squeezed scalar column gives 0-d arrays), in batch order.

    Lazily for one layout: each list is made as it is taken, so a consumer that drops its
    samples keeps no batch of tracked objects alive (which made the cyclic GC promote them
    and run full collections of 5-40 ms every few batches)."""
    if len(groups) == 1 and len(groups[0]["index"]) == k:  # one layout: in batch order
        columns = [_unstack(col) for col in groups[0]["columns"]]
        if columns:
            return map(list, zip(*columns, strict=True))
    per_sample: list[list[np.ndarray]] = [[] for _ in range(k)]  # each set by one group
    for group in groups:
        columns = [_unstack(col) for col in group["columns"]]
        for i, *row in zip(group["index"].tolist(), *columns, strict=True):
            per_sample[i] = row
    return iter(per_sample)


class Client:
    """A client of the server at ``server_address`` (``"host:port"``)."""

    def __init__(self, server_address: str) -> None:
        self._server_address = server_address
        self._channel = open_channel(server_address)
        self._signature_cache: dict[str, Any] = {}
        self._columns_cache: dict[str, Any] = {}

    def __reduce__(self) -> tuple:
        return self.__class__, (self._server_address,)

    def __repr__(self) -> str:
        return f"Client, server_address={self._server_address}"

    @property
    def server_address(self) -> str:
        return self._server_address

    @property
    def channel(self) -> Any:
        """The channel the client calls its server through (in-process or gRPC)."""
        return self._channel

    def _call(self, method: str, timeout: float | None = None, **args: Any) -> Any:
        return self._channel.call(method, args, timeout)

    def insert(self, data: Any, priorities: Mapping[str, float]) -> None:
        """Inserts ``data`` (one step; stored once) into each table of ``priorities``.

        Raises:
            InvalidArgumentError: ``priorities`` is empty.
        """
        if not priorities:
            raise InvalidArgumentError("priorities must contain at least one item")
        with self.writer(max_sequence_length=1) as writer:
            writer.append(data)
            for table, priority in priorities.items():
                writer.create_item(table=table, num_timesteps=1, priority=priority)

    def writer(
        self,
        max_sequence_length: int,
        delta_encoded: bool = False,
        chunk_length: int | None = None,
        max_in_flight_items: int | None = 25,
    ) -> Writer:
        """A legacy :class:`Writer` keeping the last ``max_sequence_length`` steps."""
        reverb_positive_int("max_sequence_length", max_sequence_length)
        if chunk_length is None:
            chunk_length = min(10, max_sequence_length)
        if reverb_positive_int("chunk_length", chunk_length) > max_sequence_length:
            raise InvalidArgumentError(
                f"chunk_length ({chunk_length}) must be a positive integer le to "
                f"max_sequence_length ({max_sequence_length})"
            )
        if max_in_flight_items is not None:
            reverb_positive_int("max_in_flight_items", max_in_flight_items)
        return Writer(WriterStream(self._channel, max_sequence_length), max_sequence_length)

    def trajectory_writer(
        self, num_keep_alive_refs: int, *, validate_items: bool = True
    ) -> TrajectoryWriter:
        """A :class:`TrajectoryWriter` keeping ``num_keep_alive_refs`` steps per column."""
        reverb_positive_int("num_keep_alive_refs", num_keep_alive_refs)
        signatures = self._table_columns if validate_items else None
        return TrajectoryWriter(WriterStream(self._channel, num_keep_alive_refs), signatures)

    def structured_writer(self, configs: Sequence[Any]) -> StructuredWriter:
        """A :class:`~recollect.reverb.structured_writer.StructuredWriter` making items by
        ``configs`` (from ``structured_writer.create_config``).

        Raises:
            InvalidArgumentError (a ValueError): ``configs`` is empty or one is invalid.
        """
        return StructuredWriter(self._channel, configs)

    def _table_columns(self, table: str) -> Any:
        if table not in self._columns_cache:
            signature = self._get_signature_for_table(table)
            self._columns_cache[table] = _signature.columns(signature)
        return self._columns_cache[table]

    def sample_batch(
        self, table: str, num_samples: int, timeout: float | None = None
    ) -> tuple[SampleInfo, list[np.ndarray]]:
        """Samples between 1 and ``num_samples`` items at once (blocks until one may be).

        Not in Reverb (its ``TFClient``/datasets batch): ``info`` fields are ``[B]`` arrays
        and the data is the flat list of ``[B, ...]`` column arrays.

        Raises:
            InvalidArgumentError: the sampled items have different layouts.
        """
        out = self._call("sample", timeout, table=table, num_samples=num_samples)
        groups = out["groups"]
        if len(groups) != 1:
            raise InvalidArgumentError(
                f"table '{table}' holds items of different column shapes; sample() them one by one."
            )
        return SampleInfo(**out["info"]), list(groups[0]["columns"])

    def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = True,
        unpack_as_table_signature: bool = False,
    ) -> Generator[list[ReplaySample] | ReplaySample, None, None]:
        """Yields ``num_samples`` samples of ``table`` (blocking while the limiter says so).

        ``emit_timesteps``: each yield is a list of one :class:`ReplaySample` per time step;
        else one ReplaySample whose data columns keep their time axis.

        Raises:
            InvalidArgumentError: ``emit_timesteps`` for columns of different lengths.
        """
        signature = self._get_signature_for_table(table) if unpack_as_table_signature else None

        def unflatten(x: list[np.ndarray]) -> Any:
            return _signature.unflatten_as(signature, x) if signature else x

        left = num_samples
        while left > 0:
            out = self._call("sample", None, table=table, num_samples=left)
            info = out["info"]
            k = len(info["key"])
            left -= k
            # lazily, as _per_sample; tuple.__new__ over zip's tuples builds each named
            # tuple in C (the generated __new__ is a Python call: ~0.3 us a sample)
            infos = map(
                _new_tuple,
                repeat(SampleInfo),
                zip(
                    info["key"].tolist(),
                    info["probability"].tolist(),
                    info["table_size"].tolist(),
                    info["priority"].tolist(),
                    info["times_sampled"].tolist(),
                    strict=True,
                ),
            )
            datas = _per_sample(out["groups"], k)
            if not emit_timesteps:
                if signature:
                    datas = map(unflatten, datas)
                yield from map(_new_tuple, repeat(ReplaySample), zip(infos, datas, strict=True))
                continue
            for si, data in zip(infos, datas, strict=True):
                if len({col.shape[0] if col.ndim else -1 for col in data}) != 1 or any(
                    col.ndim == 0 for col in data
                ):
                    raise InvalidArgumentError(
                        "Can't split non timestep trajectory into timesteps."
                    )
                yield [
                    ReplaySample(si, unflatten([np.asarray(col[t], col.dtype) for col in data]))
                    for t in range(data[0].shape[0])
                ]

    def mutate_priorities(
        self,
        table: str,
        updates: Mapping[int, float] | None = None,
        deletes: Sequence[int] | None = None,
    ) -> None:
        """Sets the priorities of ``updates``' keys, then deletes ``deletes`` (unknown keys
        are ignored)."""
        updates = updates or {}
        self._call(
            "mutate_priorities",
            table=table,
            keys=np.fromiter(updates.keys(), np.uint64, len(updates)),
            priorities=np.fromiter(updates.values(), np.float64, len(updates)),
            deletes=np.asarray(list(deletes or ()), np.uint64),
        )

    def update_priorities(self, table: str, keys: Any, priorities: Any) -> None:
        """Vectorized priority update: ``keys`` ``[N]`` (uint64), ``priorities`` ``[N]``."""
        keys = np.asarray(keys, np.uint64).reshape(-1)
        priorities = np.asarray(priorities, np.float64).reshape(-1)
        if keys.shape != priorities.shape:
            raise InvalidArgumentError(
                f"keys and priorities must have the same length; got {keys.shape} and "
                f"{priorities.shape}."
            )
        self._call(
            "mutate_priorities",
            table=table,
            keys=keys,
            priorities=priorities,
            deletes=np.zeros(0, np.uint64),
        )

    def reset(self, table: str) -> None:
        """Clears ``table`` and resets its rate limiter."""
        self._call("reset", table=table)

    def server_info(self, timeout: int | None = None) -> dict[str, TableInfo]:
        """Each table's :class:`TableInfo` by name.

        Raises:
            DeadlineExceededError: no answer within ``timeout`` seconds.
        """
        infos = self._call("server_info", timeout)
        result = {name: decode_info(node) for name, node in infos.items()}
        self._signature_cache = {name: info.signature for name, info in result.items()}
        return result

    def checkpoint(self) -> str:
        """Writes a checkpoint on the server; returns its path."""
        return str(self._call("checkpoint"))

    def _get_signature_for_table(self, table: str) -> Any:
        if table not in self._signature_cache:
            self.server_info()
        if table not in self._signature_cache:
            raise InvalidArgumentError(
                f'Could not find table "{table}". The following tables exists: '
                f"{', '.join(self._signature_cache.keys())}."
            )
        return self._signature_cache[table]


__all__ = ["Client", "TrajectoryColumn", "Writer"]
