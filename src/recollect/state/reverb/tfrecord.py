"""TFRecord files (as TensorFlow's ``RecordWriter`` writes them) read without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length (little-endian)
    uint32 masked CRC32C of the 8 length bytes
    bytes  data[length]
    uint32 masked CRC32C of data

where ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xA282EAD8 (mod 2**32)``. A file
written with ``compression_type="ZLIB"`` (what Reverb's checkpointer writes) is that
byte stream inside one zlib stream; ``"GZIP"`` inside a gzip stream. Both CRCs of
every record are checked here, and a compressed stream must be complete.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from recollect.errors import CheckpointError

__all__ = ["crc32c", "crc32c_many", "masked_crc32c", "read_records"]

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(_POLY), table >> 1)
    return table.astype(np.uint32)


_TABLE = _make_table()
_TABLE_LIST = [int(v) for v in _TABLE]
# Below this many bytes a plain byte loop is faster than the lane-parallel form.
_SMALL = 4096
_LANES = 1024


def _crc_register_small(reg: int, data: bytes) -> int:
    table = _TABLE_LIST
    for byte in data:
        reg = table[(reg ^ byte) & 0xFF] ^ (reg >> 8)
    return reg


def _crc_register_lanes(reg: int, data: bytes) -> int:
    """The CRC register after feeding ``data`` to it, computed on many lanes at once.

    CRC is linear over GF(2): for a split ``data = D0 || D1 || ... || Dk-1`` into lanes of
    equal length L, ``R(reg, D0 || rest) = R(R(reg, D0), rest)`` and
    ``R(c, D) = Z_L(c) ^ R(0, D)`` where ``Z_L`` feeds L zero bytes. ``R(0, Di)`` for every
    lane is one numpy pass of L steps over k lanes; ``Z_L`` is a 32x32 bit matrix found by
    feeding L zeros to the 32 unit registers in the same pass.
    """
    lanes = min(_LANES, len(data) // 64)
    lane_len = len(data) // lanes
    body = np.frombuffer(data, dtype=np.uint8, count=lanes * lane_len).reshape(lanes, lane_len)
    state = np.zeros(lanes + 32, dtype=np.uint32)
    state[lanes:] = np.uint32(1) << np.arange(32, dtype=np.uint32)
    feed = np.zeros(lanes + 32, dtype=np.uint32)
    table = _TABLE
    for j in range(lane_len):
        feed[:lanes] = body[:, j]
        state = table[(state ^ feed) & np.uint32(0xFF)] ^ (state >> np.uint32(8))
    lane_regs = [int(v) for v in state[:lanes]]
    # Z_L applied to a register, byte by byte: four 256-entry tables from the 32 columns.
    columns = state[lanes:]
    byte_bits = (np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1
    shift_tables = []
    for k in range(4):
        cols = columns[8 * k : 8 * k + 8]
        picked = np.where(byte_bits.astype(bool), cols[None, :], np.uint32(0))
        shift_tables.append([int(v) for v in np.bitwise_xor.reduce(picked, axis=1)])
    t0, t1, t2, t3 = shift_tables
    for lane_reg in lane_regs:
        reg = (
            t0[reg & 0xFF]
            ^ t1[(reg >> 8) & 0xFF]
            ^ t2[(reg >> 16) & 0xFF]
            ^ t3[(reg >> 24) & 0xFF]
            ^ lane_reg
        )
    return _crc_register_small(reg, data[lanes * lane_len :])


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as an int in [0, 2**32).

    ``crc32c(b"123456789") == 0xE3069283``. Large inputs are processed with numpy over
    parallel lanes (see :func:`_crc_register_lanes`), small ones byte by byte.
    """
    data = bytes(data)
    if len(data) < _SMALL:
        reg = _crc_register_small(_U32, data)
    else:
        reg = _crc_register_lanes(_U32, data)
    return reg ^ _U32


_ZEROS_FROM_INIT = [_U32]  # [l]: the register after feeding l zero bytes to 0xFFFFFFFF
_BATCH_MAX = 65536  # larger records take the lane-parallel path one by one
_BATCH_BYTES = 1 << 22


def _zeros_from_init(length: int) -> int:
    regs = _ZEROS_FROM_INIT
    while len(regs) <= length:
        reg = regs[-1]
        regs.append(_TABLE_LIST[reg & 0xFF] ^ (reg >> 8))
    return regs[length]


def crc32c_many(chunks: list[bytes]) -> np.ndarray:
    """``[crc32c(c) for c in chunks]`` as uint32 ``[len(chunks)]``, in few numpy passes.

    Records of similar length are processed together, one lane each: a record is padded
    at the front with zeros to its group's longest length (zero bytes fed to a zero
    register leave it zero, so ``R(0, zeros || d) == R(0, d)``), and the initial
    register's contribution ``R(0xFFFFFFFF, zeros(len(d)))`` is added afterwards.
    """
    out = np.zeros(len(chunks), dtype=np.uint32)
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    small = [i for i in np.argsort(lengths, kind="stable") if lengths[i] < _BATCH_MAX]
    for i in np.flatnonzero(lengths >= _BATCH_MAX):
        out[i] = crc32c(chunks[i])
    start = 0
    while start < len(small):
        stop = start + 1
        while stop < len(small) and (stop - start + 1) * lengths[small[stop]] <= _BATCH_BYTES:
            stop += 1
        group = small[start:stop]
        width = int(lengths[group[-1]])
        block = np.zeros((len(group), width), dtype=np.uint8)
        for row, i in enumerate(group):  # one copy per record
            n = int(lengths[i])
            if n:
                block[row, width - n :] = np.frombuffer(chunks[i], dtype=np.uint8)
        columns = np.ascontiguousarray(block.T)
        state = np.zeros(len(group), dtype=np.uint32)
        for j in range(width):
            state = _TABLE[(state ^ columns[j]) & np.uint32(0xFF)] ^ (state >> np.uint32(8))
        init = np.array([_zeros_from_init(int(lengths[i])) for i in group], dtype=np.uint32)
        out[group] = state ^ init ^ np.uint32(_U32)
        start = stop
    return out


def _mask(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    masked = (((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(_U32)) + np.uint64(
        _MASK_DELTA
    )
    return (masked & np.uint64(_U32)).astype(np.uint32)


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C that TFRecord framing stores (see the module docstring)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def _decompress(path: Path, raw: bytes) -> bytes:
    """The TFRecord byte stream of a file: zlib/gzip streams inflated, else ``raw``."""
    if len(raw) >= 2 and raw[0] == 0x1F and raw[1] == 0x8B:
        wbits, kind = 31, "GZIP"
    elif len(raw) >= 2 and (raw[0] & 0x0F) == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0:
        wbits, kind = 15, "ZLIB"
    else:
        return raw
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(raw) + inflater.flush()
    except zlib.error as err:
        raise CheckpointError(
            f"{path}: the {kind}-compressed TFRecord stream is damaged ({err}); the file was "
            "modified or partly written. Restore it from a good copy or load an earlier "
            "checkpoint."
        ) from err
    if not inflater.eof:
        raise CheckpointError(
            f"{path}: the {kind}-compressed TFRecord stream ends early (truncated file: "
            f"{len(raw)} bytes hold an incomplete stream). Restore it from a good copy or "
            "load an earlier checkpoint."
        )
    if inflater.unused_data:
        raise CheckpointError(
            f"{path}: {len(inflater.unused_data)} unexpected bytes after the end of the "
            f"{kind}-compressed TFRecord stream. Restore the file from a good copy."
        )
    return out


def read_records(path: str | Path) -> list[bytes]:
    """Every record of the TFRecord file ``path`` (uncompressed, ZLIB or GZIP), CRCs checked.

    Args:
        path: the file.

    Returns:
        The records' payloads in file order.

    Raises:
        CheckpointError: the file cannot be read, its compressed stream is damaged or
            incomplete, a record is truncated, or a length or data CRC does not match;
            the message names the file and the record's index and byte offset.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CheckpointError(
            f"{path}: cannot read the TFRecord file ({err.strerror or err})."
        ) from err
    stream = _decompress(path, raw)
    records: list[bytes] = []
    offsets: list[int] = []
    stored_crcs: list[int] = []
    pos, end = 0, len(stream)
    while pos < end:
        where = f"{path}: record {len(records)} at byte {pos} of the TFRecord stream"
        if end - pos < 12:
            raise CheckpointError(
                f"{where}: truncated header ({end - pos} of 12 bytes); the file was cut short. "
                "Restore it from a good copy or load an earlier checkpoint."
            )
        head = stream[pos : pos + 8]
        length = int.from_bytes(head, "little")
        stored = int.from_bytes(stream[pos + 8 : pos + 12], "little")
        if masked_crc32c(head) != stored:
            raise CheckpointError(
                f"{where}: the length's CRC does not match (stored {stored:#010x}, computed "
                f"{masked_crc32c(head):#010x}); the file is damaged. Restore it from a good "
                "copy or load an earlier checkpoint."
            )
        start = pos + 12
        if end - start < length + 4:
            raise CheckpointError(
                f"{where}: truncated data (the record says {length} bytes plus a 4-byte CRC, "
                f"{end - start} remain); the file was cut short. Restore it from a good copy "
                "or load an earlier checkpoint."
            )
        records.append(stream[start : start + length])
        offsets.append(pos)
        stored_crcs.append(int.from_bytes(stream[start + length : start + length + 4], "little"))
        pos = start + length + 4
    computed = _mask(crc32c_many(records))
    bad = np.flatnonzero(computed != np.array(stored_crcs, dtype=np.uint32))
    if len(bad):
        i = int(bad[0])
        raise CheckpointError(
            f"{path}: record {i} at byte {offsets[i]} of the TFRecord stream: the data's CRC "
            f"does not match (stored {stored_crcs[i]:#010x}, computed {int(computed[i]):#010x}); "
            "the file is damaged. Restore it from a good copy or load an earlier checkpoint."
        )
    return records
