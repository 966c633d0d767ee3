"""The public seams of the core: Table draw protocol, ids, rows= writes, samplers by name,
frame-store checkpoints (RAM and memmap) that continue the same seeded sample sequence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import CheckpointError, InvalidArgumentError, NotEnoughDataError

SPEC = {
    "observation": rc.ArraySpec((6, 5, 4), np.uint8),
    "action": rc.ArraySpec((), np.int64),
    "is_first": rc.ArraySpec((), bool),
    "is_last": rc.ArraySpec((), bool),
}
STACKS = {"observation": rc.FrameStack(4, axis=-1, padding="reset")}


def stacked_steps(num_envs: int, count: int, seed: int = 0):
    """Consistent frame stacks, as gymnasium's FrameStackObservation("reset") returns them."""
    rng = np.random.default_rng(seed)
    history = [[] for _ in range(num_envs)]
    for t in range(count):
        is_last = rng.random(num_envs) < 0.15
        first = np.array([not h for h in history])
        obs = np.empty((num_envs, 6, 5, 4), np.uint8)
        for e in range(num_envs):
            history[e].append(rng.integers(0, 255, (6, 5), dtype=np.uint8))
            last = history[e][-4:]
            obs[e] = np.stack([last[0]] * (4 - len(last)) + last, axis=-1)
            if is_last[e]:
                history[e] = []
        action = rc.ids.encode(np.arange(num_envs), t)
        yield {"observation": obs, "action": action, "is_first": first, "is_last": is_last}


def frame_buffer(**kwargs) -> rc.ReplayBuffer:
    return rc.ReplayBuffer(SPEC, 4 * 16, 4, rng=7, frame_stacks=STACKS, **kwargs)


def assert_same_future(a: rc.ReplayBuffer, b: rc.ReplayBuffer, n: int = 5) -> None:
    for _ in range(n):
        x, y = a.sample(16, 2), b.sample(16, 2)
        np.testing.assert_array_equal(x.ids, y.ids)
        for key in SPEC:
            np.testing.assert_array_equal(x.data[key], y.data[key])


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("storage", ["numpy", "memmap"])
def test_frame_store_buffers_round_trip_and_continue_the_seeded_sequence(tmp_path, storage, mmap):
    kwargs = {"storage": "memmap", "directory": tmp_path / "live"} if storage == "memmap" else {}
    buf = frame_buffer(**kwargs)
    for step in stacked_steps(4, 40):  # wraps: 16 steps per row
        buf.add_batch(step)
    buf.save(tmp_path / "ck")
    restored = rc.ReplayBuffer.load(tmp_path / "ck", mmap=mmap)
    assert restored.config()["frame_stacks"] == buf.config()["frame_stacks"]
    np.testing.assert_array_equal(
        restored.gather_all()["observation"], buf.gather_all()["observation"]
    )
    assert_same_future(buf, restored)
    for step in stacked_steps(4, 5, seed=3):  # and both keep working alike after more writes
        buf.add_batch(step)
        restored.add_batch(step)
    assert_same_future(buf, restored)


def test_memmap_frame_store_reopens_with_its_stacks(tmp_path):
    buf = frame_buffer(storage="memmap", directory=tmp_path)
    steps = list(stacked_steps(4, 30))
    for step in steps:
        buf.add_batch(step)
    expected = buf.gather_all()
    buf.close()
    del buf
    again = frame_buffer(storage="memmap", directory=tmp_path)
    for key in SPEC:
        np.testing.assert_array_equal(again.gather_all()[key], expected[key])
    with pytest.raises(CheckpointError, match="sequence_length"):
        frame_buffer(storage="memmap", directory=tmp_path, sequence_length=2)


def test_rows_advance_their_own_clocks_and_ids_encode_shard_row_time():
    buf = rc.ReplayBuffer(SPEC, 4 * 8, 4, rng=0)
    steps = list(stacked_steps(4, 3))
    buf.add_batch(steps[0])
    pick = {k: v[[2, 0]] for k, v in steps[1].items()}
    buf.add_batch(pick, rows=[2, 0])
    assert buf.reader.steps_per_row().tolist() == [2, 1, 2, 1]
    assert buf.table.index.t.tolist() == [2, 1, 2, 1]
    row2 = buf.reader.gather_row(2)
    np.testing.assert_array_equal(row2["action"], rc.ids.encode(2, [0, 1]))
    shard, row, time = rc.ids.decode(buf.sample(64).ids)
    assert set(shard.tolist()) == {0}
    assert set(zip(row.tolist(), time.tolist(), strict=True)) <= {
        (0, 0),
        (0, 1),
        (1, 0),
        (2, 0),
        (2, 1),
        (3, 0),
    }
    with pytest.raises(InvalidArgumentError, match="different numbers of steps"):
        buf.gather_all()


@pytest.mark.parametrize(
    ("rows", "match"),
    [([], "non-empty"), ([1, 1], "distinct"), ([4], r"\[0, num_envs=4\)"), ([0.5], "int row")],
)
def test_bad_rows_are_rejected_and_change_nothing(rows, match):
    buf = rc.ReplayBuffer(SPEC, 4 * 8, 4, rng=0)
    step = next(stacked_steps(4, 1))
    with pytest.raises(InvalidArgumentError, match=match):
        buf.add_batch(step, rows=rows)
    assert buf.num_frames() == 0


@settings(max_examples=60, deadline=None)
@given(
    shard=st.integers(0, rc.ids.MAX_SHARDS - 1),
    row=st.integers(0, rc.ids.MAX_ROWS - 1),
    time=st.integers(0, rc.ids.MAX_TIME - 1),
)
def test_ids_round_trip_and_are_never_negative(shard, row, time):
    i = rc.ids.encode(row, time, shard)
    assert int(i) >= 0
    assert [int(x) for x in rc.ids.decode(i)] == [shard, row, time]


def test_ids_of_other_shards_are_skipped_by_update_priorities():
    spec = {"x": rc.ArraySpec((), np.float32)}
    buf = rc.ReplayBuffer(spec, 8, 1, sampler=rc.Prioritized(), sequence_length=1, rng=0)
    for v in range(4):
        buf.add({"x": v})
    s = buf.sample(4)
    foreign = rc.ids.encode(rc.ids.decode(s.ids)[1], rc.ids.decode(s.ids)[2], shard=3)
    assert buf.update_priorities(foreign, np.full(4, 5.0)) == 4
    assert buf.update_priorities(s.ids, np.full(4, 5.0)) == 0


def test_table_draw_gather_and_stale_check_protocol():
    spec = {"x": rc.ArraySpec((), np.int64)}
    buf = rc.ReplayBuffer(spec, 8, 2, rng=0)
    for t in range(4):
        buf.add_batch({"x": np.array([t, 100 + t])})
    table = buf.table
    assert table.can_sample(4, 2) and table.can_sample(1, 4)
    draw = table.draw(8, 2)
    assert draw.table_size == 2 * 3 and len(draw) == 8
    assert not table.is_stale(draw)
    sample = buf.reader.gather(draw)
    np.testing.assert_array_equal(sample.ids, draw.ids)
    np.testing.assert_array_equal(sample.times_sampled, draw.times_sampled)
    buf.add_batch({"x": np.array([4, 104])})  # overwrites nothing yet (4 of 4 slots: t=0 goes)
    assert table.is_stale(draw) == bool((draw.times == 0).any())
    buf.clear()
    assert table.is_stale(draw) and not table.can_sample()
    with pytest.raises(NotEnoughDataError, match="empty"):
        table.draw(1)


def test_times_sampled_counts_each_window_and_resets_when_overwritten():
    spec = {"x": rc.ArraySpec((), np.int64)}
    buf = rc.ReplayBuffer(spec, 2, 1, sampler=rc.Fifo(), rng=0, track_times_sampled=True)
    buf.add({"x": 0})
    buf.add({"x": 1})
    assert buf.sample(1).times_sampled.tolist() == [1]
    # Reverb: one selection per item, Fifo's first window each time: in draw order
    assert buf.sample(3).times_sampled.tolist() == [2, 3, 4]
    buf.add({"x": 2})  # overwrites step 0's slot (counted 4)
    assert buf.sample(2).times_sampled.tolist() == [1, 2]  # window 1, never drawn before
    buf.add({"x": 3})
    assert buf.sample(1).times_sampled.tolist() == [1]  # step 2, in step 0's slot: from 0


def test_importance_weights_follow_from_probability_and_table_size():
    p = np.array([0.1, 0.2, 0.05])
    w = rc.samplers.importance_weights(p, 10, 0.5)
    expected = (10 * p) ** -0.5
    np.testing.assert_allclose(w, expected / expected.max())


class Reversed(rc.Sampler):
    """A user's sampler: the newest valid window, always (registers itself by name)."""

    def __init__(self, tag: str = "x") -> None:
        self.tag = tag

    def sample(self, batch_size, num_steps, within_episode, rng, **kwargs):
        segments = self.index.segments(num_steps, within_episode)
        return rc.Lifo._draw(self, segments, batch_size, rng)


Reversed._pick = staticmethod(rc.samplers.fifo._last_windows)


def test_user_samplers_are_resolved_by_registered_name(tmp_path):
    spec = {"x": rc.ArraySpec((), np.int64)}
    buf = rc.ReplayBuffer(spec, 8, 1, sampler=Reversed("y"), rng=0)
    for t in range(5):
        buf.add({"x": t})
    buf.save(tmp_path / "ck")
    restored = rc.ReplayBuffer.load(tmp_path / "ck")
    assert isinstance(restored.reader.sampler, Reversed) and restored.reader.sampler.tag == "y"
    assert restored.sample(1).data["x"].tolist() == [4]


def test_unknown_sampler_names_raise_saying_to_import_it(tmp_path):
    spec = {"x": rc.ArraySpec((), np.int64)}

    class Unlisted(rc.Uniform):
        name = "NotImportedAnywhere"

    buf = rc.ReplayBuffer(spec, 8, 1, sampler=Unlisted(), rng=0)
    buf.add({"x": 1})
    buf.save(tmp_path / "ck")
    del rc.samplers.base._REGISTRY["NotImportedAnywhere"]
    with pytest.raises(CheckpointError, match=r"NotImportedAnywhere.*Import the module"):
        rc.ReplayBuffer.load(tmp_path / "ck")


def test_one_sampler_instance_cannot_serve_two_buffers():
    spec = {"x": rc.ArraySpec((), np.int64)}
    sampler = rc.Uniform()
    rc.ReplayBuffer(spec, 8, 1, sampler=sampler)
    with pytest.raises(InvalidArgumentError, match="already serves another buffer"):
        rc.ReplayBuffer(spec, 8, 1, sampler=sampler)
    rc.ReplayBuffer(spec, 8, 1, sampler=sampler.copy())  # a copy is fine


def test_gatherers_are_per_buffer_unless_shared():
    spec = {"x": rc.ArraySpec((), np.int64)}
    a, b = rc.ReplayBuffer(spec, 8, 1), rc.ReplayBuffer(spec, 8, 1)
    assert a.storage.gatherer is not b.storage.gatherer
    shared = rc.storage.Gatherer(threads=1)
    c = rc.ReplayBuffer(spec, 8, 1, gatherer=shared)
    d = rc.ReplayBuffer(spec, 8, 1, gatherer=shared)
    assert c.storage.gatherer is d.storage.gatherer is shared
