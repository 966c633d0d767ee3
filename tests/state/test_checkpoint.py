"""Checkpoints: exact round trips, only stored steps written, damage detected, golden v1."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import optree
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import CheckpointError
from recollect.state.manifest import FORMAT_VERSION, MANIFEST, dump_manifest

GOLDEN = Path(__file__).parents[1] / "golden"
sys.path.insert(0, str(GOLDEN))
import make_golden  # noqa: E402

Info = make_golden.Info


def make_spec() -> dict:
    return make_golden.spec()  # nested dict, namedtuple and mixed dtypes


def random_steps(rng: np.random.Generator, num_envs: int) -> dict:
    return {
        "observation": {
            "pos": rng.normal(size=(num_envs, 3)).astype(np.float32),
            "img": rng.integers(0, 256, (num_envs, 2, 2)).astype(np.uint8),
        },
        "action": rng.integers(-5, 5, num_envs).astype(np.int32),
        "reward": rng.normal(size=num_envs).astype(np.float16),
        "info": Info(rng.normal(size=num_envs), rng.integers(0, 9, (num_envs, 2))),
        "is_last": rng.random(num_envs) < 0.25,
    }


def fill(buffer: rc.ReplayBuffer, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        buffer.add_batch(random_steps(rng, buffer.num_envs))


def leaves(tree) -> list:
    return optree.tree_leaves(tree, none_is_leaf=False)


def assert_same_contents(a: rc.ReplayBuffer, b: rc.ReplayBuffer) -> None:
    assert a.num_frames() == b.num_frames()
    np.testing.assert_array_equal(a.reader.item_ids(), b.reader.item_ids())
    for x, y in zip(leaves(a.gather_all()), leaves(b.gather_all()), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def assert_same_samples(a: rc.ReplayBuffer, b: rc.ReplayBuffer, calls=((4, None), (5, 2))) -> None:
    for batch_size, num_steps in calls:
        sa, sb = a.sample(batch_size, num_steps), b.sample(batch_size, num_steps)
        np.testing.assert_array_equal(sa.ids, sb.ids)
        np.testing.assert_array_equal(sa.probabilities, sb.probabilities)
        for x, y in zip(leaves(sa.data), leaves(sb.data), strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("num_envs", "adds", "clear_at"),
    [(1, 5, None), (3, 4, None), (3, 7, None), (3, 17, None), (2, 20, 13), (2, 14, 14)],
)
def test_round_trip_uniform_is_identical_and_continues_the_same(tmp_path, num_envs, adds, clear_at):
    buf = rc.ReplayBuffer(make_spec(), capacity=6 * num_envs, num_envs=num_envs, rng=7)
    rng = np.random.default_rng(0)
    for i in range(adds):
        if i == clear_at:
            buf.clear()
        buf.add_batch(random_steps(rng, num_envs))
    buf.sample(3)  # advance the RNG before saving
    buf.save(tmp_path / "ck")
    restored = rc.ReplayBuffer.load(tmp_path / "ck")
    assert restored.data_spec == buf.data_spec
    assert type(restored.data_spec["info"]) is Info  # namedtuple class found again
    assert_same_contents(buf, restored)
    assert_same_samples(buf, restored)
    for target in (buf, restored):  # same future after more writes
        fill(target, 4, seed=99)
    assert_same_contents(buf, restored)
    assert_same_samples(buf, restored)


def test_round_trip_prioritized_keeps_priorities_and_sample_sequence(tmp_path):
    buf = rc.ReplayBuffer(
        make_spec(), 24, num_envs=2, rng=3, sampler=rc.Prioritized(0.7), sequence_length=2
    )
    fill(buf, 17)
    s = buf.sample(8)
    buf.update_priorities(s.ids, np.linspace(0.1, 5.0, 8))
    buf.save(tmp_path / "ck")
    restored = rc.ReplayBuffer.load(tmp_path / "ck")
    assert type(restored.reader.sampler) is rc.Prioritized
    assert restored.reader.sampler.priority_exponent == pytest.approx(0.7)
    assert_same_contents(buf, restored)
    state_a, state_b = buf.reader.sampler.state_dict(), restored.reader.sampler.state_dict()
    for key in state_a:
        np.testing.assert_array_equal(state_a[key], state_b[key])
    for target in (buf, restored):
        target.update_priorities(s.ids[:3], [7.0, 0.5, 2.0])
        fill(target, 3, seed=5)
    assert_same_samples(buf, restored, calls=((6, 2), (9, 2)))
    np.testing.assert_array_equal(buf.sample(5).weights, restored.sample(5).weights)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 6),
    ops=st.lists(st.sampled_from(["add", "add", "add", "clear", "sample"]), max_size=25),
)
def test_round_trip_holds_after_any_sequence_of_operations(num_envs, max_length, ops):
    buf = rc.ReplayBuffer(make_spec(), max_length * num_envs, num_envs, rng=1)
    rng = np.random.default_rng(2)
    for op in ops:
        if op == "add":
            buf.add_batch(random_steps(rng, num_envs))
        elif op == "clear":
            buf.clear()
        elif buf.num_frames():
            buf.sample(2)
    with tempfile.TemporaryDirectory() as tmp:
        buf.save(Path(tmp) / "ck")
        restored = rc.ReplayBuffer.load(Path(tmp) / "ck")
    assert_same_contents(buf, restored)
    assert restored.reader.rng.bit_generator.state == buf.reader.rng.bit_generator.state
    if buf.num_frames():
        assert_same_samples(buf, restored, calls=((3, None),))


def test_only_stored_steps_are_written_oldest_first(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=1000, num_envs=2, rng=0)
    fill(buf, 30)
    buf.save(tmp_path / "ck")
    manifest = json.loads((tmp_path / "ck" / MANIFEST).read_text())
    assert manifest["layout"]["stored_steps"] == 30
    pos = np.load(leaf_file(tmp_path / "ck"), allow_pickle=False)  # plain .npy, no pickle
    assert pos.shape == (2, 30, 3)
    np.testing.assert_array_equal(pos, buf.gather_all()["observation"]["pos"])
    total = sum(p.stat().st_size for p in (tmp_path / "ck").iterdir())
    assert total < 30 * 2 * 200


def test_mmap_load_maps_full_buffers_and_never_modifies_the_checkpoint(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=12, num_envs=2, rng=0)
    fill(buf, 9)
    buf.save(tmp_path / "ck")
    mapped = rc.ReplayBuffer.load(tmp_path / "ck", mmap=True)
    assert type(mapped.storage.arrays[0]) is np.ndarray
    assert not mapped.storage.arrays[0].flags.owndata  # a view of the mapping
    assert_same_contents(buf, mapped)
    assert_same_samples(buf, mapped)
    twin = rc.ReplayBuffer.load(tmp_path / "ck")
    fill(mapped, 5, seed=3)  # copy-on-write: writes stay private to this process
    fill(twin, 5, seed=3)
    assert_same_contents(twin, mapped)  # new steps land in the mapped arrays
    assert_same_contents(buf, rc.ReplayBuffer.load(tmp_path / "ck"))


def test_saving_again_replaces_the_checkpoint_and_leaves_no_siblings(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    fill(buf, 3)
    buf.save(tmp_path / "ck")
    fill(buf, 2, seed=1)
    buf.save(tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert rc.ReplayBuffer.load(tmp_path / "ck").num_frames() == 5


def test_refuses_to_overwrite_a_directory_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    with pytest.raises(CheckpointError, match="not a recollect checkpoint; refusing"):
        buf.save(tmp_path / "data")
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep me"


def test_interrupted_save_is_recovered_from_the_newest_complete_sibling(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    fill(buf, 2)
    buf.save(tmp_path / "old")
    fill(buf, 3, seed=1)
    buf.save(tmp_path / "new")
    # State between "rename ck -> old" and "rename tmp -> ck" of an interrupted save.
    old_token = (tmp_path / "old" / ".recollect-save").read_text()
    new_token = (tmp_path / "new" / ".recollect-save").read_text()
    (tmp_path / "old").rename(tmp_path / f"ck.old-{old_token}")
    (tmp_path / "new").rename(tmp_path / f"ck.tmp-1-{new_token}")
    incomplete = tmp_path / "ck.tmp-2-00000000deadbeef"
    incomplete.mkdir()  # an incomplete write
    (incomplete / ".recollect-save").write_text("00000000deadbeef")
    assert rc.ReplayBuffer.load(tmp_path / "ck").num_frames() == 5
    fill(buf, 1, seed=2)
    buf.save(tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert rc.ReplayBuffer.load(tmp_path / "ck").num_frames() == 6


def test_save_leaves_sibling_directories_it_did_not_create_alone(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    fill(buf, 2)
    buf.save(tmp_path / "ck")
    shutil.copytree(tmp_path / "ck", tmp_path / "ck.old-backup")  # a user's backup copy
    (tmp_path / "ck.tmp-notes").mkdir()
    (tmp_path / "ck.tmp-notes" / "todo.txt").write_text("keep me")
    fill(buf, 3, seed=1)
    buf.save(tmp_path / "ck")
    buf.save(tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "ck.old-backup", "ck.tmp-notes"]
    assert rc.ReplayBuffer.load(tmp_path / "ck.old-backup").num_frames() == 2
    assert (tmp_path / "ck.tmp-notes" / "todo.txt").read_text() == "keep me"


def test_a_checkpoint_the_user_moved_aside_is_neither_adopted_nor_deleted(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    fill(buf, 2)
    buf.save(tmp_path / "ck")
    (tmp_path / "ck").rename(tmp_path / "ck.old-keep")
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        rc.ReplayBuffer.load(tmp_path / "ck")
    fill(buf, 3, seed=1)
    buf.save(tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "ck.old-keep"]
    assert rc.ReplayBuffer.load(tmp_path / "ck").num_frames() == 5
    assert rc.ReplayBuffer.load(tmp_path / "ck.old-keep").num_frames() == 2


def test_saving_through_a_symlink_keeps_the_link_pointing_at_the_new_checkpoint(tmp_path):
    (tmp_path / "disk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "disk" / "ck")  # dangling until the first save
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    fill(buf, 2)
    buf.save(tmp_path / "link")
    fill(buf, 3, seed=1)
    buf.save(tmp_path / "link")
    assert (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["ck"]
    assert rc.ReplayBuffer.load(tmp_path / "link").num_frames() == 5


def test_saving_through_a_symlink_to_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    buf = rc.ReplayBuffer(make_spec(), capacity=8, rng=0)
    with pytest.raises(CheckpointError, match=r"a symlink to .*file, which is not a directory"):
        buf.save(tmp_path / "link")
    assert (tmp_path / "file").read_text() == "x"


# -- damaged checkpoints --------------------------------------------------------
@pytest.fixture
def saved(tmp_path) -> Path:
    buf = rc.ReplayBuffer(make_spec(), capacity=16, num_envs=2, rng=0)
    fill(buf, 5)
    buf.save(tmp_path / "ck")
    return tmp_path / "ck"


def leaf_file(path: Path, leaf: str = "observation/pos") -> Path:
    manifest = json.loads((path / MANIFEST).read_text())
    columns = manifest["state"]["storage"]["columns"]
    suffix = "-" + leaf.replace("/", ".")
    return path / next(v["__columns__"] for k, v in columns.items() if k.endswith(suffix))


def test_missing_leaf_file_is_reported(saved):
    victim = leaf_file(saved)
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"{victim.name}: missing file"):
        rc.ReplayBuffer.load(saved)


def test_truncated_npy_is_reported(saved):
    victim = leaf_file(saved)
    victim.write_bytes(victim.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=f"{victim.name}: truncated"):
        rc.ReplayBuffer.load(saved)


def test_wrong_checksum_is_reported(saved):
    victim = leaf_file(saved, "action")
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=f"{victim.name}: checksum mismatch"):
        rc.ReplayBuffer.load(saved)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        rc.ReplayBuffer.load(saved, mmap=True)


def test_edited_manifest_is_reported(saved):
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["layout"]["stored_steps"] += 1
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError, match=r"manifest\.json: checksum mismatch; the manifest was"
    ):
        rc.ReplayBuffer.load(saved)


def test_newer_format_version_is_reported(saved):
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (saved / MANIFEST).write_bytes(dump_manifest(manifest))  # consistent checksum
    newer = FORMAT_VERSION + 1
    with pytest.raises(CheckpointError, match=rf"format_version {newer} is newer .*upgrade"):
        rc.ReplayBuffer.load(saved)


def test_invalid_json_and_non_checkpoints_are_reported(saved, tmp_path):
    (saved / MANIFEST).write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest\.json: not valid JSON"):
        rc.ReplayBuffer.load(saved)
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        rc.ReplayBuffer.load(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match=r"manifest\.json: missing; .* not a recollect"):
        rc.ReplayBuffer.load(tmp_path / "plain")


def test_consistent_manifest_with_wrong_counters_is_reported(saved):
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["layout"]["stored_steps"] = 3
    (saved / MANIFEST).write_bytes(dump_manifest(manifest))
    with pytest.raises(CheckpointError, match="do not match stored_steps=3"):
        rc.ReplayBuffer.load(saved)


# -- TransitionBuffer ---------------------------------------------------------
def drive_transitions(tb: rc.TransitionBuffer, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = tb.num_envs
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    for _ in range(steps):
        nxt = rng.normal(size=(n, 3)).astype(np.float32)
        term = rng.random(n) < 0.3
        tb.add(obs, rng.integers(0, 4, n), rng.normal(size=n).astype(np.float32), nxt, term)
        obs = np.where(term[:, None], rng.normal(size=(n, 3)).astype(np.float32), nxt)


def test_transition_buffer_round_trip_keeps_next_observations(tmp_path):
    tb = rc.TransitionBuffer(capacity=16, num_envs=2, rng=4)
    drive_transitions(tb, 13, seed=0)
    tb.save(tmp_path / "tb")
    restored = rc.TransitionBuffer.load(tmp_path / "tb")
    assert restored.num_frames() == tb.num_frames()
    for target in (tb, restored):  # chains continue across the checkpoint
        drive_transitions(target, 3, seed=1)
    a, b = tb.sample(64), restored.sample(64)
    for field in ("observation", "action", "reward", "next_observation", "terminated", "ids"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    with pytest.raises(CheckpointError, match="holds a TransitionBuffer, not a ReplayBuffer"):
        rc.load_buffer(tmp_path / "tb", kind="ReplayBuffer")


def test_empty_transition_buffer_round_trips(tmp_path):
    rc.TransitionBuffer(capacity=8, num_envs=2, rng=3).save(tmp_path / "tb")
    restored = rc.TransitionBuffer.load(tmp_path / "tb")
    assert restored.capacity == 8 and restored.num_frames() == 0
    drive_transitions(restored, 2, seed=0)
    assert restored.sample(2).next_observation.shape == (2, 3)


def test_empty_transition_buffer_keeps_prioritized_and_frame_stack_options(tmp_path):
    sampler = rc.Prioritized(priority_exponent=0.7, epsilon=1e-3, initial_max_priority=2.0)
    stack = rc.FrameStack(2, axis=0, padding="zero")
    rc.TransitionBuffer(8, 2, rng=3, prioritized=sampler, frame_stack=stack).save(tmp_path / "tb")
    restored = rc.TransitionBuffer.load(tmp_path / "tb")
    assert restored.config()["prioritized"] == sampler.get_config()
    assert restored.config()["frame_stack"] == stack.config()


# -- golden v1 and v2 --------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("name", sorted(make_golden.BUILDERS))
def test_golden_checkpoint_still_loads(name, version, tmp_path):
    shutil.copytree(GOLDEN / version / name, tmp_path / name)  # never mutate committed files
    loaded = rc.load_buffer(tmp_path / name)
    make_golden.check(name, loaded)


# -- large files (checksummed on a worker thread) and sha256 checksums ----------
def test_large_leaf_files_round_trip_and_detect_damage_in_the_middle(tmp_path):
    spec = {"x": rc.ArraySpec((64,), np.float32), "is_last": rc.ArraySpec((), np.bool_)}
    buf = rc.ReplayBuffer(spec, capacity=40_000, num_envs=2, rng=0)
    rng = np.random.default_rng(0)
    buf.storage.arrays[0][...] = rng.standard_normal(buf.storage.arrays[0].shape)
    state = buf.table.state_dict()
    state["index"]["t"][:] = 20_000 + 7  # full and wrapped: slot order on disk
    buf.table.load_state_dict(state)
    buf.save(tmp_path / "ck")
    for mmap in (False, True):
        assert_same_contents(buf, rc.ReplayBuffer.load(tmp_path / "ck", mmap=mmap))
    victim = leaf_file(tmp_path / "ck", "x")
    assert victim.stat().st_size > 8 << 20  # several chunks
    with open(victim, "r+b") as f:
        f.seek(victim.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    for mmap in (False, True):
        with pytest.raises(CheckpointError, match=f"{victim.name}: checksum mismatch"):
            rc.ReplayBuffer.load(tmp_path / "ck", mmap=mmap)


def test_sha256_checksums_are_accepted(saved):
    import hashlib

    manifest = json.loads((saved / MANIFEST).read_text())
    for name, info in manifest["files"].items():
        info["checksum"] = "sha256:" + hashlib.sha256((saved / name).read_bytes()).hexdigest()
    (saved / MANIFEST).write_bytes(dump_manifest(manifest))
    assert rc.ReplayBuffer.load(saved).num_frames() == 10
    info = next(iter(manifest["files"].values()))
    info["checksum"] = "md5:0"
    (saved / MANIFEST).write_bytes(dump_manifest(manifest))
    with pytest.raises(CheckpointError, match="unknown checksum 'md5:0'"):
        rc.ReplayBuffer.load(saved)


def test_prioritized_transition_buffer_round_trip(tmp_path):
    tb = rc.TransitionBuffer(capacity=16, num_envs=2, rng=4, prioritized=True)
    drive_transitions(tb, 11, seed=0)
    s = tb.sample(6)
    tb.update_priorities(s.ids, np.arange(1.0, 7.0))
    tb.save(tmp_path / "tb")
    restored = rc.TransitionBuffer.load(tmp_path / "tb")
    a, b = tb.sample(32), restored.sample(32)
    for field in ("ids", "weights", "probabilities", "next_observation"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_saving_a_structured_dtype_leaf_is_refused_naming_the_leaf(tmp_path):
    dtype = np.dtype([("a", np.float32), ("b", np.int32)])
    buf = rc.ReplayBuffer({"obs": {"pair": rc.ArraySpec((2,), dtype)}}, capacity=8)
    buf.add({"obs": {"pair": np.zeros(2, dtype)}})
    with pytest.raises(CheckpointError, match=r"leaf 'obs/pair': its dtype .* is structured"):
        buf.save(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


def test_saving_with_a_sampler_its_name_does_not_rebuild_is_refused(tmp_path):
    def make(extra):
        return type("ShadowedSampler14", (rc.samplers.Uniform,), extra)

    first = make({"__module__": __name__})
    make({"__module__": __name__})  # a second class registers under the same name
    buf = rc.ReplayBuffer(make_spec(), capacity=8, sampler=first())
    with pytest.raises(CheckpointError, match=r"sampler .*ShadowedSampler14: the name 'Shadowe"):
        buf.save(tmp_path / "ck")


class _Forgetful14(rc.samplers.Uniform):
    """Takes an argument it does not keep: get_config cannot rebuild it."""

    def __init__(self, width):
        super().__init__()


def test_saving_with_a_sampler_get_config_cannot_rebuild_is_refused(tmp_path):
    buf = rc.ReplayBuffer(make_spec(), capacity=8, sampler=_Forgetful14(3))
    with pytest.raises(CheckpointError, match=r"_Forgetful14: its get_config\(\) cannot rebuild"):
        buf.save(tmp_path / "ck")
