"""Every dtype Reverb carries, str returned as bytes, nests, and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

import recollect.reverb as reverb
from recollect.errors import CheckpointError
from recollect.reverb.platform import checkpointers_lib
from reverb_dtypes import NUMERIC_DTYPES

DTYPES = NUMERIC_DTYPES


def _table(name: str = "t", max_size: int = 100) -> reverb.Table:
    return reverb.Table(
        name,
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
    )


def _step(i: int) -> dict:
    step = {f"x{j}": np.full((2,), i, dt) for j, dt in enumerate(DTYPES)}
    step.update(s=f"s{i}", b=b"b%d" % i, strs=np.array(["ab", "c"]), nested=[(np.int8(i),)])
    return step


def test_all_dtypes_round_trip() -> None:
    assert len(DTYPES) + 4 >= 18  # 14 numeric + bool-like + str/bytes columns
    with reverb.Server([_table()]) as server:
        client = server.localhost_client()
        client.insert(_step(3), {"t": 1.0})
        sample = next(client.sample("t", 1))[0].data
    flat = {k: v for k, v in zip(sorted(_step(0)), sample, strict=False)}
    for j, dt in enumerate(DTYPES):
        value = sample[sorted(_step(0)).index(f"x{j}")]
        assert value.dtype == np.dtype(dt) and (value == np.full(2, 3, dt)).all()
    assert sample[sorted(_step(0)).index("s")].item() == b"s3"
    assert sample[sorted(_step(0)).index("b")].item() == b"b3"
    assert list(sample[sorted(_step(0)).index("strs")]) == [b"ab", b"c"]
    assert flat


def test_checkpoint_restores_items_priorities_and_counters(tmp_path) -> None:
    ckpt = checkpointers_lib.DefaultCheckpointer(str(tmp_path))
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table], checkpointer=ckpt) as server:
        client = server.localhost_client()
        for i in range(12):
            client.insert(_step(i), {"t": float(i + 1)})
        list(client.sample("t", 3))
        path = client.checkpoint()
        before = table.info
    assert path.startswith(str(tmp_path))
    fresh = reverb.Table(
        "t",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([fresh], checkpointer=ckpt) as server:
        client = server.localhost_client()
        after = fresh.info
        assert after.current_size == before.current_size == 10
        assert after.rate_limiter_info.sample_stats.completed == 3
        seen = {}
        for s in client.sample("t", 200, emit_timesteps=False):
            i = int(s.data[sorted(_step(0)).index("nested")][0])
            seen[i] = s.info.priority
            assert s.data[sorted(_step(0)).index("s")][0] == b"s%d" % i
        assert set(seen) <= set(range(2, 12)) and all(p == i + 1 for i, p in seen.items())
        client.insert(_step(99), {"t": 1.0})  # the restored table keeps working
        assert fresh.info.current_size == 10


def test_server_without_checkpoints_starts_empty(tmp_path) -> None:
    ckpt = checkpointers_lib.DefaultCheckpointer(str(tmp_path / "none"))
    with reverb.Server([_table()], checkpointer=ckpt) as server:
        assert server.localhost_client().server_info()["t"].current_size == 0


def test_damaged_dm_reverb_checkpoint_is_a_clear_error(tmp_path) -> None:
    fake = tmp_path / "2024-01-01"
    fake.mkdir()
    (fake / "tables.tfrecord").write_bytes(b"not a tfrecord")
    (fake / "DONE").write_bytes(b"")
    ckpt = checkpointers_lib.DefaultCheckpointer(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint"):
        reverb.Server([_table()], checkpointer=ckpt)


def test_server_restores_a_dm_reverb_checkpoint() -> None:
    import json
    from pathlib import Path

    pytest.importorskip("google.protobuf")
    root = Path(__file__).parents[1] / "fixtures" / "reverb_v0.14_tables"
    expected = json.loads((root / "expected.json").read_text())
    tables = [_table(t["name"], t["max_size"]) for t in expected["tables"]]
    ckpt = checkpointers_lib.DefaultCheckpointer(str(root / "checkpoint"))
    with reverb.Server(tables, checkpointer=ckpt) as server:
        infos = server.localhost_client().server_info()
        for t in expected["tables"]:
            info = infos[t["name"]]
            assert (info.current_size, info.num_episodes, info.num_unique_samples) == (
                t["current_size"],
                t["num_episodes"],
                t["num_unique_samples"],
            )
        # the Fifo sampler returns the oldest item: the first one in expected.json
        first = expected["tables"][1]["items"][0]
        sample = next(server.localhost_client().sample("heap", 1, emit_timesteps=False))
        assert sample.info.priority == first["priority"]
        column = first["data"][0]
        want = np.frombuffer(bytes.fromhex(column["hex"]), column["dtype"]).reshape(column["shape"])
        np.testing.assert_array_equal(sample.data[0], want)
