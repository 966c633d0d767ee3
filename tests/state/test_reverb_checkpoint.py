"""Reading dm-reverb 0.14 checkpoints: real fixtures restored bit-exactly, damage detected."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from recollect.errors import CheckpointError
from recollect.specs import ArraySpec
from recollect.state.reverb import ReverbTensorSpec, find_checkpoint, read_checkpoint
from recollect.state.reverb.tfrecord import masked_crc32c, read_records

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHARED = FIXTURES / "reverb_checkpoint_v0.14"  # made by the author (see its README)
OURS = FIXTURES / "reverb_v0.14_tables"  # made by tests/fixtures/make_reverb_fixtures.py


def expected(fixture: Path) -> dict:
    return json.loads((fixture / "expected.json").read_text())


def leaf_json_matches(array: np.ndarray, leaf: dict) -> bool:
    if leaf["dtype"] == "string":
        return (
            array.dtype == object
            and [bytes(x).hex() for x in array.reshape(-1)] == leaf["strings_hex"]
        )
    return (
        array.dtype.name == leaf["dtype"]
        and list(array.shape) == leaf["shape"]
        and array.tobytes().hex() == leaf["hex"]
    )


def spec_matches(spec: object, want: dict) -> bool:
    """A decoded signature nest against make_reverb_fixtures' / the README's JSON form."""
    if "namedtuple" in want:
        fields = [f for f, _ in want["fields"]]
        return (
            type(spec).__name__ == want["namedtuple"]
            and list(spec._fields) == fields  # type: ignore[attr-defined]
            and all(spec_matches(getattr(spec, f), w) for f, w in want["fields"])
        )
    if "dict" in want:
        return (
            isinstance(spec, dict)
            and list(spec) == [k for k, _ in want["dict"]]
            and all(spec_matches(spec[k], w) for k, w in want["dict"])
        )
    if "tuple" in want:
        return (
            isinstance(spec, tuple)
            and len(spec) == len(want["tuple"])
            and all(spec_matches(s, w) for s, w in zip(spec, want["tuple"], strict=True))
        )
    assert isinstance(spec, ReverbTensorSpec)
    dtype = "string" if spec.dtype == object else spec.dtype.name
    ok = (
        list(spec.shape or ()) == want["shape"]
        and dtype == want["dtype"]
        and spec.name == want["name"]
        and spec.bounded == (want["spec"] == "BoundedTensorSpec")
    )
    if spec.bounded:
        ok = ok and spec.minimum.tolist() == want["minimum"]  # type: ignore[union-attr]
        ok = ok and spec.maximum.tolist() == want["maximum"]  # type: ignore[union-attr]
    return ok


# ---------------------------------------------------------------- the shared fixture


def test_shared_fixture_every_item_bit_exact():
    want = expected(SHARED)
    ck = read_checkpoint(SHARED / "checkpoint")
    assert ck.path == SHARED / want["checkpoint_subdir"]
    [table] = ck.tables
    wt = want["tables"][0]
    assert table.name == "uniform_table"
    assert [i.key for i in table.items] == [i["key"] for i in wt["items"]]
    compared = 0
    for item, want_item in zip(table.items, wt["items"], strict=True):
        assert item.priority == want_item["priority"]
        assert item.times_sampled == want_item["times_sampled"]
        nest = table.unflatten(item)
        assert nest.policy_info == ()
        for path, leaf in want_item["data"]["leaves"].items():
            assert leaf_json_matches(getattr(nest, path), leaf), (item.key, path)
            compared += 1
    assert compared == 27 * 6
    times = [i.inserted_at_ns for i in table.items]
    assert times == sorted(times) and times[0] > 1_700_000_000 * 10**9


def test_shared_fixture_definition_and_counters():
    wt = expected(SHARED)["tables"][0]
    table = read_checkpoint(SHARED / "checkpoint").table("uniform_table")
    info = wt["info_after_load"]
    assert table.sampler.kind == "Uniform" and table.remover.kind == "Fifo"
    assert table.max_size == 1000 and table.max_times_sampled == 0
    rl = table.rate_limiter
    assert (rl.samples_per_insert, rl.min_diff, rl.max_diff, rl.min_size_to_sample) == (
        info["rate_limiter"]["samples_per_insert"],
        info["rate_limiter"]["min_diff"],
        info["rate_limiter"]["max_diff"],
        info["rate_limiter"]["min_size_to_sample"],
    )
    counters = wt["checkpoint_counters"]
    assert (rl.insert_count, rl.sample_count, rl.delete_count) == (
        counters["insert_count"],
        counters["sample_count"],
        counters["delete_count"],
    )
    assert table.num_deleted_episodes == counters["num_deleted_episodes"]
    assert table.num_unique_samples == counters["num_unique_samples"]
    assert spec_matches(table.signature, wt["definition"]["signature"])
    assert (len(table.items), table.num_episodes) == (info["current_size"], info["num_episodes"])
    observation = table.signature.observation
    assert observation.array_spec(drop_leading=True) == ArraySpec((4,), np.float32, "observation")
    assert table.signature.action.array_spec(drop_leading=True).dtype == np.int64


# ---------------------------------------------------------------- our own fixture


@pytest.mark.parametrize("name", ["prioritized", "heap", "queue", "delta"])
def test_own_fixture_every_item_bit_exact(name):
    want = {t["name"]: t for t in expected(OURS)["tables"]}[name]
    table = read_checkpoint(OURS / "checkpoint").table(name)
    assert len(table.items) == len(want["items"]) > 0
    for item, want_item in zip(table.items, want["items"], strict=True):
        assert (item.key, item.priority, item.times_sampled) == (
            want_item["key"],
            want_item["priority"],
            want_item["times_sampled"],
        )
        assert len(item.data) == len(want_item["data"])
        for c, (array, leaf) in enumerate(zip(item.data, want_item["data"], strict=True)):
            assert leaf_json_matches(array, leaf), (name, item.key, c)


def test_own_fixture_definitions():
    want = {t["name"]: t for t in expected(OURS)["tables"]}
    ck = read_checkpoint(OURS / "checkpoint")
    assert sorted(t.name for t in ck.tables) == sorted(want)
    p = ck.table("prioritized")
    assert (p.sampler.kind, p.sampler.priority_exponent, p.remover.kind) == (
        "Prioritized",
        0.8,
        "Fifo",
    )
    assert p.max_size == 8 and p.rate_limiter.insert_count == 9
    assert p.rate_limiter.sample_count == 30 and p.rate_limiter.delete_count == 1
    assert any(i.times_sampled > 0 for i in p.items)
    h = ck.table("heap")
    assert (h.sampler.kind, h.remover.kind) == ("MaxHeap", "MinHeap")
    q = ck.table("queue")
    assert (q.sampler.kind, q.remover.kind, q.max_times_sampled, q.max_size) == (
        "Fifo",
        "Fifo",
        1,
        10,
    )
    assert (q.rate_limiter.min_diff, q.rate_limiter.max_diff) == (0.0, 10.0)
    assert q.rate_limiter.delete_count == 2
    d = ck.table("delta")
    assert d.signature is None and d.flat_signature() == []
    assert isinstance(d.unflatten(d.items[0]), list)
    for name, table in [("prioritized", p), ("heap", h), ("queue", q)]:
        assert spec_matches(table.signature, want[name]["signature"]), name
    for table in ck.tables:  # what real Reverb's server_info() said before the checkpoint
        w = want[table.name]
        assert (
            len(table.items),
            table.num_episodes,
            table.num_deleted_episodes,
            table.num_unique_samples,
        ) == (
            w["current_size"],
            w["num_episodes"],
            w["num_deleted_episodes"],
            w["num_unique_samples"],
        )
    # nested dict signature: leaves in tf.nest order, an image column, strings as bytes
    assert [s.name for s in p.flat_signature()] == ["action", "done", "text", "image", "vector"]
    nest = p.unflatten(p.items[0])
    assert nest["obs"]["image"].shape == (3, 84, 84) and nest["obs"]["image"].dtype == np.uint8
    assert isinstance(nest["info"]["text"][0], bytes)
    # squeezed single-step columns keep the step's own shape
    assert h.items[0].data[2].shape == (2,) and h.items[0].data[0].shape == ()


def test_own_fixture_holds_delta_encoded_chunks():
    """The fixture really exercises delta decoding (else the bit-exact test proves little)."""
    from recollect.state.reverb.protos import messages

    directory = find_checkpoint(OURS / "checkpoint")
    assert directory is not None
    chunk_cls = messages()["ChunkData"]
    chunks = [chunk_cls.FromString(r) for r in read_records(directory / "chunks.tfrecord")]
    delta = [c for c in chunks if c.delta_encoded]
    assert delta and all(c.data.tensors[0].tensor_shape.dim[0].size > 1 for c in delta)
    # the legacy writer's chunks: frames (uint8), counters (int64) and rewards (float32)
    assert all([t.dtype for t in c.data.tensors] == [4, 9, 1] for c in delta)


# ---------------------------------------------------------------- damage


def copy_root(tmp_path: Path, fixture: Path = SHARED) -> tuple[Path, Path]:
    root = tmp_path / "ck"
    shutil.copytree(fixture / "checkpoint", root)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    directory = find_checkpoint(root)
    assert directory is not None
    return root, directory


@pytest.mark.parametrize("name", ["tables.tfrecord", "items.tfrecord", "chunks.tfrecord"])
def test_flipped_byte_in_compressed_file(tmp_path, name):
    root, directory = copy_root(tmp_path)
    path = directory / name
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=rf"{name}: .*(damaged|CRC|ends early)"):
        read_checkpoint(root)


@pytest.mark.parametrize("name", ["tables.tfrecord", "items.tfrecord", "chunks.tfrecord"])
def test_flipped_byte_inside_a_record_fails_its_crc(tmp_path, name):
    """A change that leaves the zlib stream valid is caught by the record's data CRC."""
    root, directory = copy_root(tmp_path)
    path = directory / name
    stream = bytearray(zlib.decompress(path.read_bytes()))
    stream[20] ^= 0x01  # inside record 0's data (its header is 12 bytes)
    path.write_bytes(zlib.compress(bytes(stream)))
    with pytest.raises(CheckpointError, match=rf"{name}: record 0 at byte 0 .*data's CRC"):
        read_checkpoint(root)


@pytest.mark.parametrize("name", ["tables.tfrecord", "items.tfrecord", "chunks.tfrecord"])
def test_truncated_file(tmp_path, name):
    root, directory = copy_root(tmp_path)
    path = directory / name
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=rf"{name}: .*ends early \(truncated"):
        read_checkpoint(root)


def test_truncated_record_in_complete_stream(tmp_path):
    root, directory = copy_root(tmp_path)
    path = directory / "items.tfrecord"
    path.write_bytes(zlib.compress(zlib.decompress(path.read_bytes())[:-3]))
    with pytest.raises(CheckpointError, match=r"items.tfrecord: record 26 .*truncated data"):
        read_checkpoint(root)


def test_missing_done_falls_back_to_the_previous_checkpoint(tmp_path):
    root, directory = copy_root(tmp_path)
    newer = root / "2099-01-01T00:00:00.000000000+00:00"
    shutil.copytree(OURS / "checkpoint" / find_checkpoint(OURS / "checkpoint").name, newer)  # type: ignore[union-attr]
    assert read_checkpoint(root).path == newer  # complete: the latest is read
    (newer / "DONE").unlink()
    assert read_checkpoint(root).path == directory  # unfinished: the previous one
    (directory / "DONE").unlink()
    with pytest.raises(CheckpointError, match=r"no Reverb checkpoint here .*without DONE"):
        read_checkpoint(root)
    assert find_checkpoint(root) is None


def test_missing_file(tmp_path):
    root, directory = copy_root(tmp_path)
    (directory / "chunks.tfrecord").unlink()
    with pytest.raises(CheckpointError, match=r"chunks.tfrecord: missing from the checkpoint"):
        read_checkpoint(root)


@pytest.mark.parametrize(
    ("name", "other", "message"),
    [
        ("tables.tfrecord", "items.tfrecord", "PriorityTableCheckpoint"),
        ("items.tfrecord", "chunks.tfrecord", "PrioritizedItem"),
        ("chunks.tfrecord", "items.tfrecord", "ChunkData"),
    ],
)
def test_wrong_proto(tmp_path, name, other, message):
    root, directory = copy_root(tmp_path)
    shutil.copy(directory / other, directory / name)
    with pytest.raises(CheckpointError, match=rf"{name}: record 0 is not a .*{message}"):
        read_checkpoint(root)


def write_tfrecord(path: Path, records: list[bytes]) -> None:
    """A ZLIB-compressed TFRecord file, framed as TensorFlow's RecordWriter frames it."""
    out = bytearray()
    for record in records:
        head = len(record).to_bytes(8, "little")
        out += head + masked_crc32c(head).to_bytes(4, "little")
        out += record + masked_crc32c(record).to_bytes(4, "little")
    path.write_bytes(zlib.compress(bytes(out)))


def test_rewritten_files_read_back(tmp_path):
    """The test's own framing round-trips (so the damage below is the only change)."""
    root, directory = copy_root(tmp_path)
    for name in ("tables.tfrecord", "items.tfrecord", "chunks.tfrecord"):
        write_tfrecord(directory / name, read_records(directory / name))
    assert len(read_checkpoint(root).tables[0].items) == 27


def test_item_referring_to_an_absent_chunk(tmp_path):
    root, directory = copy_root(tmp_path)
    path = directory / "chunks.tfrecord"
    write_tfrecord(path, read_records(path)[1:])
    with pytest.raises(CheckpointError, match=r"item \d+\), column \d+ refers to chunk \d+"):
        read_checkpoint(root)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"no Reverb checkpoint here"):
        read_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=r"no Reverb checkpoint here"):
        read_checkpoint(tmp_path / "absent")


def test_items_know_their_episode_and_first_step():
    wt = expected(SHARED)["tables"][0]
    items = read_checkpoint(SHARED / "checkpoint").tables[0].items
    episode_ids: dict[int, int] = {}
    for item, want in zip(items, wt["items"], strict=True):
        assert item.episode_id is not None
        assert episode_ids.setdefault(want["episode"], item.episode_id) == item.episode_id
        assert item.first_step == want["steps"][0]
    assert len(set(episode_ids.values())) == 3
    heap = read_checkpoint(OURS / "checkpoint").table("heap")  # squeezed columns: no run
    assert all(i.episode_id is None and i.first_step is None for i in heap.items)


def rewrite(path: Path, message: str, edit) -> None:
    """Parses every record of ``path`` as ``message``, applies ``edit(list)``, writes back."""
    from recollect.state.reverb.protos import messages

    cls = messages()[message]
    parsed = [cls.FromString(r) for r in read_records(path)]
    edit(parsed)
    write_tfrecord(path, [m.SerializeToString() for m in parsed])


def test_damaged_snappy_block_names_the_chunk(tmp_path):
    root, directory = copy_root(tmp_path)
    keys = []

    def damage(chunks):
        tensor = chunks[5].data.tensors[0]
        tensor.tensor_content = tensor.tensor_content[:-2]
        keys.append(chunks[5].chunk_key)

    rewrite(directory / "chunks.tfrecord", "ChunkData", damage)
    with pytest.raises(
        CheckpointError,
        match=rf"chunks.tfrecord: record 5 \(chunk {keys[0]}\): the Snappy-compressed data of a "
        r"tensor \(\w+, shape \(\d+,?\d*\)\) is damaged: a literal",
    ):
        read_checkpoint(root)


def test_item_slicing_past_its_chunk(tmp_path):
    root, directory = copy_root(tmp_path)

    def damage(items):
        items[0].flat_trajectory.columns[1].chunk_slices[0].offset = 5

    rewrite(directory / "items.tfrecord", "PrioritizedItem", damage)
    with pytest.raises(
        CheckpointError,
        match=r"items.tfrecord: record 0 \(item \d+\), column 1 slices steps \[5, 6\) of chunk "
        r"\d+, which holds 1",
    ):
        read_checkpoint(root)


def test_item_of_an_unknown_table(tmp_path):
    root, directory = copy_root(tmp_path)

    def damage(items):
        items[3].table = "elsewhere"

    rewrite(directory / "items.tfrecord", "PrioritizedItem", damage)
    with pytest.raises(
        CheckpointError, match=r"record 3 \(item \d+\) belongs to table 'elsewhere', which"
    ):
        read_checkpoint(root)


def test_step_spec():
    from recollect.errors import SpecError

    table = read_checkpoint(SHARED / "checkpoint").tables[0]
    spec = table.step_spec()
    assert type(spec).__name__ == "Trajectory" and spec.policy_info == ()
    assert spec.observation == ArraySpec((4,), np.float32, "observation")
    assert spec.step_type == ArraySpec((), np.int32, "step_type")
    assert spec.next_step_type.name == "step_type"  # TF-Agents reuses the spec
    assert spec.discount == ArraySpec((), np.float32, "discount")
    ours = read_checkpoint(OURS / "checkpoint")
    with pytest.raises(SpecError, match=r"column 'small' has no time dimension \(shape \(\)\)"):
        ours.table("heap").step_spec()
    with pytest.raises(SpecError, match=r"column 'text' holds strings"):
        ours.table("prioritized").step_spec()
    with pytest.raises(SpecError, match=r"Reverb table 'delta' has no signature"):
        ours.table("delta").step_spec()
