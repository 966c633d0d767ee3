"""The checkpoint's ``.npy`` header reader: same answer as numpy's, without ``ast``.

numpy's header reader runs ``ast.literal_eval``; on CPython 3.11 that can raise a
spurious ``SystemError`` ("AST constructor recursion depth mismatch", cpython
gh-106905) while another thread builds an AST, and a checkpoint load failed that
way in the default test run (test_checkpoint_load_while_saving.py). Our reader
parses the header numpy's writer writes by itself.
"""

from __future__ import annotations

import ast
import io

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import CheckpointError
from recollect.state.npyio import _read_header

DTYPES = [
    "bool",
    "int8",
    "uint16",
    "int32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "S7",
    "U3",
    ">i4",
    "<f8",
    "M8[ns]",
]


def npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 5), max_size=4).map(tuple),
    version=st.sampled_from([(1, 0), (2, 0)]),
)
def test_header_matches_numpys_reader(dtype, shape, version):
    data = npy_bytes(np.zeros(shape, dtype), version)
    ours = _read_header(io.BytesIO(data), "x.npy")
    theirs_file = io.BytesIO(data)
    np.lib.format.read_magic(theirs_file)
    read = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }[version]
    shape_, _, dtype_ = read(theirs_file)
    assert ours == (tuple(shape_), dtype_, theirs_file.tell())


def test_a_load_needs_no_ast(tmp_path, monkeypatch):
    buf = rc.ReplayBuffer({"obs": rc.ArraySpec((3,), np.float32)}, 8, 2)
    buf.add_batch({"obs": np.arange(6, dtype=np.float32).reshape(2, 3)})
    buf.save(tmp_path / "replay")

    def broken(*args, **kwargs):
        raise SystemError("AST constructor recursion depth mismatch (before=168, after=42)")

    monkeypatch.setattr(ast, "literal_eval", broken)
    for mmap in (False, True):
        loaded = rc.ReplayBuffer.load(tmp_path / "replay", mmap=mmap)
        np.testing.assert_array_equal(
            loaded.gather_all()["obs"][:, 0], np.arange(6, dtype=np.float32).reshape(2, 3)
        )


def test_a_structured_dtype_still_reads_through_numpy():
    dtype = np.dtype([("a", "<i4"), ("b", "<f8")])
    assert _read_header(io.BytesIO(npy_bytes(np.zeros(3, dtype))), "x.npy")[:2] == ((3,), dtype)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b"\x93NUMPX" + b[6:], "magic"),
        (lambda b: b[:6] + b"\x03\x00" + b[8:], "version 1.0 or 2.0"),
        (lambda b: b[:20], "cut short"),
        (lambda b: b[:4], "magic"),
        (lambda b: b.replace(b"False", b"True "), "fortran order"),
    ],
    ids=["magic", "version", "cut", "short", "fortran"],
)
def test_a_damaged_header_raises_checkpoint_error_naming_the_file(mangle, message):
    data = mangle(npy_bytes(np.zeros((2, 3), np.float32)))
    with pytest.raises(CheckpointError, match=rf"x\.npy: .*{message}"):
        _read_header(io.BytesIO(data), "x.npy")
