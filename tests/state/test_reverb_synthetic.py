"""Property test: checkpoints laid out as Reverb 0.14 lays them out, read back exactly.

A slow, obvious writer (one Snappy literal per tensor, delta encoding row by row, every
column chunked on its own or all columns in one chunk as the legacy writer does) makes
random tables; :func:`read_checkpoint` must return every item's windows bit-exactly.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recollect.state.reverb import read_checkpoint
from recollect.state.reverb.protos import messages
from recollect.state.reverb.tfrecord import masked_crc32c

DTYPES = {
    "float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "bytes": 7,
    "complex64": 8, "int64": 9, "bool": 10, "uint16": 17, "complex128": 18, "float16": 19,
    "uint32": 22, "uint64": 23,
}  # fmt: skip


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def snappy_literal_block(data: bytes) -> bytes:
    if not data:
        return varint(0)
    n = len(data) - 1
    width = max(1, (n.bit_length() + 7) // 8)
    return varint(len(data)) + bytes([(59 + width) << 2]) + n.to_bytes(width, "little") + data


def delta_encode(x: np.ndarray) -> np.ndarray:
    if x.ndim < 2 or x.dtype.kind not in "iu":
        return x
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    out = u.copy()
    for i in range(1, len(u)):
        out[i] = u[i] - u[i - 1]
    return out.view(x.dtype)


def tensor(m: dict, x: np.ndarray, delta: bool) -> object:
    proto = m["TensorProto"](dtype=DTYPES[x.dtype.name if x.dtype != object else "bytes"])
    for d in x.shape:
        proto.tensor_shape.dim.add(size=d)
    if x.dtype == object:
        words = list(x.reshape(-1))
        proto.tensor_content = b"".join(varint(len(w)) for w in words) + b"".join(words)
    else:
        with np.errstate(over="ignore"):
            encoded = delta_encode(x) if delta else x
        proto.tensor_content = snappy_literal_block(
            encoded.astype(x.dtype.newbyteorder("<")).tobytes()
        )
    return proto


def write_file(path: Path, records: list[bytes]) -> None:
    out = bytearray()
    for record in records:
        head = len(record).to_bytes(8, "little")
        out += head + masked_crc32c(head).to_bytes(4, "little")
        out += record + masked_crc32c(record).to_bytes(4, "little")
    path.write_bytes(zlib.compress(bytes(out)))


@st.composite
def tables(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    columns = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(sorted(DTYPES)))
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        columns.append((name, shape))
    steps = draw(st.integers(1, 12))
    data = []
    for name, shape in columns:
        size = (steps, *shape)
        if name == "bytes":
            flat = [rng.bytes(int(rng.integers(0, 5))) for _ in range(int(np.prod(size)))]
            x = np.empty(len(flat), dtype=object)
            x[:] = flat
            data.append(x.reshape(size))
        else:  # every bit pattern (NaNs included) must come back
            raw = rng.integers(0, 256, int(np.prod(size)) * np.dtype(name).itemsize, np.uint8)
            x = raw.view(name).reshape(size) if name != "bool" else raw.astype(bool).reshape(size)
            data.append(x)
    windows = draw(
        st.lists(
            st.integers(0, steps - 1).flatmap(
                lambda s: st.tuples(st.just(s), st.integers(1, steps - s))
            ),
            min_size=1,
            max_size=6,
        )
    )
    return columns, data, windows, draw(st.integers(1, 5)), draw(st.booleans()), draw(st.booleans())


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tables())
@example(  # a squeezed string column: a 0-d object array, not a bare bytes object
    case=(
        [("bytes", ())],
        [np.array([b"\xcf\xeb"], dtype=object)],
        [(0, 1), (0, 1)],
        1,
        False,
        False,
    )
)
def test_random_tables_read_back_exactly(tmp_path_factory, case):
    columns, data, windows, chunk_length, legacy, delta = case
    m = messages()
    steps = len(data[0])
    directory = tmp_path_factory.mktemp("ck") / "2026-01-01T00:00:00+00:00"
    directory.mkdir()
    chunk_records, where = [], {}  # where[(column, step)] = (chunk key, row, tensor index)
    key = 100
    for start in range(0, steps, chunk_length):
        stop = min(steps, start + chunk_length)
        groups = [list(range(len(columns)))] if legacy else [[c] for c in range(len(columns))]
        for group in groups:
            key += 1
            chunk = m["ChunkData"](chunk_key=key, delta_encoded=delta)
            chunk.sequence_range.episode_id = 7
            chunk.sequence_range.start, chunk.sequence_range.end = start, stop - 1
            for index, c in enumerate(group):
                chunk.data.tensors.append(tensor(m, data[c][start:stop], delta))
                for t in range(start, stop):
                    where[(c, t)] = (key, t - start, index)
            chunk_records.append(chunk.SerializeToString())
    item_records = []
    for n, (first, length) in enumerate(windows):
        item = m["PrioritizedItem"](key=n + 1, table="t", priority=n / 2, times_sampled=n)
        item.inserted_at.seconds = 1000 + n
        for c in range(len(columns)):
            column = item.flat_trajectory.columns.add(squeeze=length == 1 and n % 2 == 1)
            t = first
            while t < first + length:  # one slice per chunk the window crosses
                chunk_key, row, index = where[(c, t)]
                span = 1
                while t + span < first + length and where[(c, t + span)][0] == chunk_key:
                    span += 1
                column.chunk_slices.add(chunk_key=chunk_key, offset=row, length=span, index=index)
                t += span
        item_records.append(item.SerializeToString())
    table = m["PriorityTableCheckpoint"](table_name="t", max_size=100)
    table.sampler.uniform = True
    table.remover.fifo = True
    for c, (name, shape) in enumerate(columns):
        leaf = table.signature.dict_value.fields[f"c{c}"].tensor_spec_value
        leaf.name = f"c{c}"
        leaf.dtype = DTYPES[name]
        for d in (-1, *shape):
            leaf.shape.dim.add(size=d)
    write_file(directory / "tables.tfrecord", [table.SerializeToString()])
    write_file(directory / "items.tfrecord", item_records)
    write_file(directory / "chunks.tfrecord", chunk_records[::-1])  # order does not matter
    (directory / "DONE").touch()

    got = read_checkpoint(directory.parent).table("t")
    assert [i.key for i in got.items] == list(range(1, len(windows) + 1))
    for n, (item, (first, length)) in enumerate(zip(got.items, windows, strict=True)):
        assert (item.priority, item.times_sampled) == (n / 2, n)
        assert (item.episode_id, item.first_step) == (
            (None, None) if length == 1 and n % 2 == 1 else (7, first)
        )
        for c, array in enumerate(item.data):
            want = data[c][first : first + length]
            if length == 1 and n % 2 == 1:
                want = want.reshape(want.shape[1:])
            assert array.shape == want.shape and array.dtype == want.dtype
            if want.dtype == object:
                assert array.tolist() == want.tolist()
            else:
                assert array.tobytes() == want.tobytes()
