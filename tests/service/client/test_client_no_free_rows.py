"""``NoFreeRowsError``: a shard without enough free rows says so by type, not by text (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError, NoFreeRowsError, RecollectError
from recollect.service import Server

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}


def test_no_free_rows_error_is_an_invalid_argument_error():
    assert issubclass(NoFreeRowsError, InvalidArgumentError)
    assert issubclass(NoFreeRowsError, ValueError) and issubclass(NoFreeRowsError, RecollectError)


def test_a_full_shard_raises_no_free_rows_error_naming_table_shard_and_rows():
    client = Server({"t": rc.ReplayBuffer(SPEC, 40, 2)}).client()
    writer = client.writer("t", 2)
    with pytest.raises(NoFreeRowsError, match=r"table 't' shard 0 has 0 free row\(s\) of 2"):
        client.writer("t", 1)
    with pytest.raises(InvalidArgumentError, match="free row"):  # existing `except` still works
        client.writer("t", 1)
    writer.close()
    assert client.writer("t", 2).rows.tolist() == [0, 1]


def test_all_shards_full_raises_no_free_rows_error():
    client = Server({"t": rc.ReplayBuffer(SPEC, 80, 4)}, num_shards=2).client()
    held = [client.writer("t", 2), client.writer("t", 2)]  # held: a dropped writer frees rows
    with pytest.raises(NoFreeRowsError, match=r"no shard of table 't' has 1 free rows"):
        client.writer("t", 1)
    assert sorted(w.shard for w in held) == [0, 1]


def test_writer_placement_skips_a_full_shard_by_error_type_not_message(monkeypatch):
    server = Server({"t": rc.ReplayBuffer(SPEC, 80, 4)}, num_shards=2)
    full, free = server.shards["t"]

    def reserve(*args, **kwargs):
        raise NoFreeRowsError("shard is full")  # no "free row" in the text

    monkeypatch.setattr(full, "reserve", reserve)
    for _ in range(3):  # whichever shard the round-robin starts at
        writer = server.client().writer("t", 2)
        assert writer.shard == free.index
        writer.close()


def test_other_invalid_arguments_of_a_shard_still_propagate(monkeypatch):
    server = Server({"t": rc.ReplayBuffer(SPEC, 80, 4)}, num_shards=2)
    for shard in server.shards["t"]:

        def reserve(*args, **kwargs):
            raise InvalidArgumentError("some other bad argument")

        monkeypatch.setattr(shard, "reserve", reserve)
    with pytest.raises(InvalidArgumentError, match="some other bad argument") as info:
        server.client().writer("t", 2)
    assert not isinstance(info.value, NoFreeRowsError)
