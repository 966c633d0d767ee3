"""``ReplayBuffer(episode_end=...)``: a leaf and value (TF-Agents ``step_type == LAST``) mark
episode ends exactly as a bool ``is_last`` leaf does.

The oracle is twofold: tests/reference.py's ``ReferenceBuffer`` (windows enumerated by
brute force), and an ``is_last`` twin buffer written the same steps plus
``is_last = step_type == 2`` (same seed: the same windows, draws and data).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import (
    CheckpointError,
    DTypeError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    SpecError,
)
from recollect.specs import FlatSpec
from reference import ReferenceBuffer

LAST = 2  # TF-Agents' StepType.LAST
END = ("step_type", LAST)
SPEC = {  # a TF-Agents Trajectory's leaves, with mixed dtypes
    "step_type": rc.ArraySpec((), np.int32),
    "observation": rc.ArraySpec((2, 3), np.uint8),
    "action": rc.ArraySpec((), np.int64),
    "reward": rc.ArraySpec((), np.float16),
    "next_step_type": rc.ArraySpec((), np.int32),
}
TWIN_SPEC = {**SPEC, "is_last": rc.ArraySpec((), np.bool_)}


def steps(first: int, step_type: np.ndarray, twin: bool = False) -> dict[str, np.ndarray]:
    """Steps of leading shape ``step_type.shape``; every value derives from a counter."""
    v = first + np.arange(step_type.size).reshape(step_type.shape)
    out = {
        "step_type": step_type.astype(np.int32),
        "observation": ((v[..., None, None] + np.arange(6).reshape(2, 3)) % 251).astype(np.uint8),
        "action": v.astype(np.int64),
        "reward": (v % 1024).astype(np.float16),
        "next_step_type": ((step_type + 1) % 3).astype(np.int32),
    }
    if twin:
        out["is_last"] = step_type == LAST
    return out


def sampler(kind: str) -> rc.Sampler:
    return {"uniform": rc.Uniform, "fifo": rc.Fifo, "prioritized": lambda: rc.Prioritized(0.6)}[
        kind
    ]()


def pair(num_envs: int, max_length: int, kind: str, seed: int = 0, **kwargs):
    """The buffer under test and its ``is_last`` twin, equally seeded."""
    seq = 2 if kind == "prioritized" else None
    made = [
        rc.ReplayBuffer(
            spec,
            num_envs * max_length,
            num_envs,
            rng=seed,
            sampler=sampler(kind),
            sequence_length=seq,
            **extra,
            **kwargs,
        )
        for spec, extra in ((SPEC, {"episode_end": END}), (TWIN_SPEC, {}))
    ]
    return made[0], made[1]


def windows(buf: rc.ReplayBuffer, n: int) -> list[tuple[int, int]]:
    rows, times = buf.table.index.segments(n, True).enumerate()
    return list(zip(rows.tolist(), times.tolist(), strict=True))


def assert_samples_equal(buf: rc.ReplayBuffer, twin: rc.ReplayBuffer, n: int) -> None:
    """``buf`` draws what its twin draws, and no window holds an end before its last step."""
    a, b = buf.sample(16, n), twin.sample(16, n)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.probabilities, b.probabilities)
    for path in SPEC:
        np.testing.assert_array_equal(a.data[path], b.data[path])
    assert not (a.data["step_type"][:, :-1] == LAST).any()


step_types = st.sampled_from([0, 1, 1, 1, LAST])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 6),
    kind=st.sampled_from(["uniform", "fifo", "prioritized"]),
    data=st.data(),
)
def test_step_type_ends_give_the_reference_windows_and_the_is_last_twins_samples(
    num_envs, max_length, kind, data
):
    """add, add_batch (all rows and rows=), extend and clear, over wraparound."""
    buf, twin = pair(num_envs, max_length, kind)
    ref = ReferenceBuffer(num_envs, max_length, FlatSpec(SPEC).index("step_type"), LAST)
    flat = FlatSpec(SPEC)
    counter = 0
    for _ in range(data.draw(st.integers(1, 12))):
        op = data.draw(st.sampled_from(["batch", "rows", "extend", "clear"]))
        if op == "clear":
            buf.clear(), twin.clear(), ref.clear()
            continue
        rows = list(range(num_envs))
        if op == "rows":
            rows = data.draw(st.lists(st.integers(0, num_envs - 1), min_size=1, unique=True))
        count = data.draw(st.integers(1, 2 * max_length)) if op == "extend" else None
        shape = (len(rows),) if count is None else (len(rows), count)
        kinds = data.draw(st.lists(step_types, min_size=int(np.prod(shape)), max_size=99))
        types = np.array(kinds[: int(np.prod(shape))], np.int32).reshape(shape)
        step, step_twin = steps(counter, types), steps(counter, types, twin=True)
        counter += types.size
        if op == "extend":
            buf.extend(step), twin.extend(step_twin)
            for j in range(count):
                ref.add_batch([step[p][:, j] for p in flat.paths], rows)
        elif op == "batch" and num_envs == 1:  # the unbatched fast path
            buf.add({k: v[0] for k, v in step.items()})
            twin.add({k: v[0] for k, v in step_twin.items()})
            ref.add_batch([step[p] for p in flat.paths], rows)
        else:
            given_rows = None if op == "batch" else rows
            buf.add_batch(step, rows=given_rows), twin.add_batch(step_twin, rows=given_rows)
            ref.add_batch([step[p] for p in flat.paths], rows)
    assert buf.writer.episode_aware
    assert buf.info().num_episodes == twin.info().num_episodes
    for n in range(1, max_length + 1):
        assert windows(buf, n) == ref.windows(n, True) == windows(twin, n)
    if windows(buf, 2):
        assert_samples_equal(buf, twin, 2)


def test_windows_may_end_on_a_boundary_step_but_never_hold_one_before():
    buf = rc.ReplayBuffer(SPEC, 10, rng=0, episode_end=END)
    types = np.array([0, 1, 1, LAST, 0, 1, LAST, 0, 1, 1], np.int32)
    buf.extend({k: v[None] for k, v in steps(0, types).items()})
    starts = [t for _, t in windows(buf, 2)]
    assert starts == [0, 1, 2, 4, 5, 7, 8]  # never from a LAST step (3, 6)
    assert [t for _, t in windows(buf, 3)] == [0, 1, 4, 7]
    sample = buf.sample(400, 2)
    assert not (sample.data["step_type"][:, 0] == LAST).any()
    assert (sample.data["step_type"][:, 1] == LAST).any()  # [.., boundary] is an item
    everything = buf.sample(400, 2, within_episode=False)  # the override still crosses
    assert (everything.data["step_type"][:, 0] == LAST).any()


def test_a_bool_leaf_by_path_or_pair_and_false_opting_out_of_is_last():
    spec = {"x": rc.ArraySpec((), np.float32), "done": rc.ArraySpec((), np.bool_)}
    done = np.array([False, True, False, False])
    for option in ("done", ("done", True)):
        buf = rc.ReplayBuffer(spec, 4, rng=0, episode_end=option)
        buf.extend({"x": np.zeros((1, 4), np.float32), "done": done[None]})
        assert [t for _, t in windows(buf, 2)] == [0, 2]
    plain = rc.ReplayBuffer({**spec, "is_last": rc.ArraySpec((), bool)}, 4, episode_end=False)
    plain.extend({"x": np.zeros((1, 4), np.float32), "done": done[None], "is_last": done[None]})
    assert not plain.writer.episode_aware and plain.config()["episode_end"] is False
    assert plain.sample(8, 2).table_size == 3  # every stored window: episodes are crossed
    with pytest.raises(InvalidArgumentError, match=r"within_episode=True needs episode ends"):
        plain.sample(8, 2, within_episode=True)


@pytest.mark.parametrize(
    ("option", "error", "match"),
    [
        (("nope", 2), SpecError, r"names leaf 'nope', which the spec does not have"),
        (("observation", 2), SpecError, r"leaf 'observation' must be a scalar.*shape \(2, 3\)"),
        (("reward", 2), DTypeError, r"leaf 'reward' must be an integer or bool.*float16"),
        ("step_type", DTypeError, r"leaf 'step_type' must be a bool.*got dtype int32"),
        (("step_type", 2.0), InvalidArgumentTypeError, r"value of leaf 'step_type'.*int; got 2"),
        (("step_type", True), InvalidArgumentTypeError, r"must be an int; got True"),
        (("step_type", 2**31), InvalidArgumentError, r"2147483648 cannot be stored.*int32"),
        ((3, 2), InvalidArgumentTypeError, r"names a leaf by its path.*got 3 of type int"),
        (("step_type", 2, 1), InvalidArgumentTypeError, r"must be None.*\(path, value\)"),
        (True, InvalidArgumentTypeError, r"must be None.*False \(no episode ends\).*got True"),
    ],
)
def test_a_bad_episode_end_raises_naming_the_leaf_and_builds_nothing(option, error, match):
    with pytest.raises(error, match=match):
        rc.ReplayBuffer(SPEC, 8, episode_end=option)


def test_a_bool_leafs_pair_needs_a_bool_and_is_last_must_stay_a_bool_scalar():
    spec = {"x": rc.ArraySpec((), np.float32), "done": rc.ArraySpec((), np.bool_)}
    with pytest.raises(InvalidArgumentTypeError, match=r"bool leaf 'done' must be True or False"):
        rc.ReplayBuffer(spec, 4, episode_end=("done", 1))
    bad = {"x": rc.ArraySpec((), np.float32), "is_last": rc.ArraySpec((), np.int8)}
    with pytest.raises(SpecError, match=r"'is_last'.*must be a bool scalar.*episode_end=False"):
        rc.ReplayBuffer(bad, 4)
    assert not rc.ReplayBuffer(bad, 4, episode_end=False).writer.episode_aware
    assert rc.ReplayBuffer(bad, 4, episode_end=("is_last", 2)).writer.episode_aware


def test_the_episode_end_leaf_is_never_compressed():
    with pytest.raises(InvalidArgumentError, match=r"compression\['step_type'\].*flag leaves"):
        rc.ReplayBuffer(SPEC, 8, episode_end=END, compression={"step_type": "zlib"})


def _filled(buf: rc.ReplayBuffer, twin: rc.ReplayBuffer | None = None, count: int = 23) -> None:
    rng = np.random.default_rng(3)
    types = rng.choice([0, 1, 1, LAST], size=(buf.num_envs, count)).astype(np.int32)
    buf.extend(steps(0, types))
    if twin is not None:
        twin.extend(steps(0, types, twin=True))


def test_config_from_config_and_a_checkpoint_keep_the_episode_ends(tmp_path):
    buf, twin = pair(3, 7, "prioritized", seed=5)
    _filled(buf, twin)  # wrapped rings
    assert buf.config()["episode_end"] == ["step_type", LAST]
    assert "episode_end" not in twin.config()  # the spec's is_last: configs stay as before
    rebuilt = rc.ReplayBuffer.from_config(buf.config())
    assert rebuilt.writer.episode_aware and rebuilt.config() == buf.config()
    back = rc.ReplayBuffer.load(buf.save(tmp_path / "ckpt"))
    assert back.config() == buf.config()
    assert back.info().num_episodes == buf.info().num_episodes > 0
    for n in (1, 2, 3):
        assert windows(back, n) == windows(buf, n) == windows(twin, n)
    assert_samples_equal(back, twin, 2)  # the RNG continues where the saved buffer was
    more = steps(1000, np.array([[LAST], [1], [LAST]], np.int32))
    back.extend(more)  # new ends are still marked after the restore
    twin.extend({**more, "is_last": more["step_type"] == LAST})
    assert windows(back, 2) == windows(twin, 2)


def test_a_format_1_state_rebuilds_its_ends_from_the_step_type_leaf():
    buf, _ = pair(2, 6, "uniform")
    _filled(buf)
    state = buf.state_dict()
    index = {k: v for k, v in state["table"]["index"].items() if not k.startswith("end_")}
    fresh = rc.ReplayBuffer.from_config(buf.config())
    fresh.load_state_dict({**state, "table": {**state["table"], "index": index}})
    for n in (2, 3):
        assert windows(fresh, n) == windows(buf, n)


def test_a_memmap_directory_reopens_with_its_episode_end_and_refuses_another(tmp_path):
    kwargs = {"storage": "memmap", "directory": tmp_path / "mm"}
    buf = rc.ReplayBuffer(SPEC, 12, 2, rng=0, episode_end=END, **kwargs)
    _filled(buf)
    want = windows(buf, 2)
    buf.close()
    again = rc.ReplayBuffer(SPEC, 12, 2, rng=0, episode_end=END, **kwargs)
    assert windows(again, 2) == want
    again.close()
    for other in (None, False):
        with pytest.raises(CheckpointError, match=r"episode_end=\['step_type', 2\]"):
            rc.ReplayBuffer(SPEC, 12, 2, rng=0, episode_end=other, **kwargs)


def test_frame_stacks_restart_after_a_step_type_end_as_after_is_last():
    stack = {"frames": rc.FrameStack(3, axis=0, padding="reset")}
    frames = rc.ArraySpec((3, 2), np.uint8)
    buf = rc.ReplayBuffer(
        {**SPEC, "frames": frames}, 16, 2, rng=1, frame_stacks=stack, episode_end=END
    )
    twin = rc.ReplayBuffer({**TWIN_SPEC, "frames": frames}, 16, 2, rng=1, frame_stacks=stack)
    rng = np.random.default_rng(0)
    history: list[list[int]] = [[], []]
    ended = [True, True]
    for t in range(20):  # wraps the 8-step rows
        types = rng.choice([0, 1, LAST], size=2).astype(np.int32)
        stacks = []
        for row in range(2):
            frame = t * 2 + row + 1
            history[row] = [frame] if ended[row] else [*history[row], frame]
            ended[row] = types[row] == LAST
            last = history[row][-3:]
            padded = [last[0]] * (3 - len(last)) + last
            stacks.append(np.repeat(np.array(padded, np.uint8)[:, None], 2, axis=1))
        step = {**steps(t * 2, types), "frames": np.stack(stacks)}
        buf.add_batch(step)
        twin.add_batch({**step, "is_last": types == LAST})
    a, b = buf.sample(32, 2), twin.sample(32, 2)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.data["frames"], b.data["frames"])
    whole = buf.reader.gather_all()["frames"]  # rebuilt stacks equal what the env returned
    np.testing.assert_array_equal(whole[:, -1], np.stack(stacks))
