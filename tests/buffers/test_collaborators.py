"""The collaborators a ReplayBuffer holds (issue 37): a writer, a reader and a persistence, each
working on its own over one Table and one storage; the buffer is a thin front over them (no
mixins, 25 public members at most) and the names that moved still resolve, with a warning."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.adapters.prefetch import as_source
from recollect.buffers.buffer_state import BufferPersistence
from recollect.buffers.replay_buffer import buffer_from_saved
from recollect.buffers.sampling import BufferReader
from recollect.buffers.source import SampleSource
from recollect.buffers.writes import BufferWriter
from recollect.buffers.wrong_class import MOVED
from recollect.errors import CheckpointError, InvalidArgumentError, ShapeError
from recollect.specs import FlatSpec
from recollect.state.files import read_state
from recollect.storage.episode_ends import resolve_episode_end
from recollect.storage.factory import make_storage
from recollect.table import Table

NUM_ENVS, LENGTH = 3, 8
SPEC = {
    "observation": rc.ArraySpec((2,), np.float32),
    "action": rc.ArraySpec((), np.int32),
    "frame": rc.ArraySpec((2, 3), np.uint8),
    "is_last": rc.ArraySpec((), bool),
}


def _parts(seed: int = 0) -> tuple[FlatSpec, Table, object]:
    flat = FlatSpec(SPEC)
    table = Table(NUM_ENVS, LENGTH, episode_aware=True, rng=seed, leaf_paths=flat.paths)
    storage = make_storage(flat, NUM_ENVS, LENGTH, episode_end=resolve_episode_end(flat))
    return flat, table, storage


def _step(t: int) -> dict[str, np.ndarray]:
    return {
        "observation": np.full((NUM_ENVS, 2), t, np.float32),
        "action": np.full(NUM_ENVS, t, np.int32),
        "frame": np.full((NUM_ENVS, 2, 3), t, np.uint8),
        "is_last": np.zeros(NUM_ENVS, bool),
    }


# -- BufferWriter -------------------------------------------------------------------------


def test_a_writer_alone_writes_steps_a_reader_over_the_same_parts_reads_back():
    flat, table, storage = _parts()
    writer = BufferWriter(flat, table, storage)
    reader = BufferReader(flat, table, storage)
    for t in range(5):
        writer.add_batch(_step(t))
    assert table.num_stored == 5 * NUM_ENVS
    everything = reader.gather_all()
    assert everything["observation"].shape == (NUM_ENVS, 5, 2)
    np.testing.assert_array_equal(everything["action"][0], np.arange(5, dtype=np.int32))
    assert everything["frame"].dtype == np.uint8
    np.testing.assert_array_equal(reader.steps_per_row(), [5, 5, 5])
    np.testing.assert_array_equal(reader.gather_row(1)["action"], np.arange(5, dtype=np.int32))


def test_a_writer_says_its_geometry():
    flat, table, storage = _parts()
    writer = BufferWriter(flat, table, storage)
    assert writer.flat_spec is flat and writer.lock is table.lock
    assert (writer.max_length, writer.num_envs, writer.episode_aware) == (LENGTH, NUM_ENVS, True)
    plain = FlatSpec({"x": rc.ArraySpec((), np.float32)})
    assert not BufferWriter(plain, Table(1, 4), make_storage(plain, 1, 4)).episode_aware


def test_a_writer_writes_nothing_when_a_leaf_has_the_wrong_shape():
    flat, table, storage = _parts()
    writer = BufferWriter(flat, table, storage)
    bad = {**_step(0), "observation": np.zeros((NUM_ENVS, 3), np.float32)}
    with pytest.raises(ShapeError, match="observation"):
        writer.add_batch(bad)
    assert table.num_stored == 0 and table.clocks.tolist() == [0, 0, 0]


def test_write_leaves_equals_add_batch_of_the_same_step_and_block_equals_extend():
    parts = [_parts() for _ in range(3)]
    by_leaves, by_steps, by_block = (BufferWriter(*p) for p in parts)
    flat = parts[0][0]
    steps = [_step(t) for t in range(3)]
    for step in steps:
        by_leaves.write_leaves([step[p] for p in flat.paths])
        by_steps.add_batch(step)
    by_block.write_leaves([np.stack([s[p] for s in steps], 1) for p in flat.paths], block=True)
    a, b, c = (BufferReader(*p).gather_all() for p in parts)
    for path in flat.paths:
        np.testing.assert_array_equal(a[path], b[path])
        np.testing.assert_array_equal(a[path], c[path])


# -- BufferReader -------------------------------------------------------------------------


def test_a_reader_is_a_sample_source_whose_draw_equals_its_sample():
    drawn, sampled = [], []
    for out in (drawn, sampled):
        flat, table, storage = _parts(seed=7)
        writer, reader = BufferWriter(flat, table, storage), BufferReader(flat, table, storage)
        for t in range(6):
            writer.add_batch(_step(t))
        assert isinstance(reader, SampleSource) and reader.remote is False
        for _ in range(3):
            s = reader.draw(4, 2)() if out is drawn else reader.sample(4, 2)
            out.append((s.ids, s.data["observation"]))
    for (ids_a, obs_a), (ids_b, obs_b) in zip(drawn, sampled, strict=True):
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_array_equal(obs_a, obs_b)
        assert obs_a.shape == (4, 2, 2)


def test_a_reader_gathers_a_table_draw_and_gives_the_time_axis():
    flat, table, storage = _parts()
    writer, reader = BufferWriter(flat, table, storage), BufferReader(flat, table, storage)
    for t in range(4):
        writer.add_batch(_step(t))
    sample = reader.gather(table.draw(5, 3))
    assert sample.data["frame"].shape == (5, 3, 2, 3)
    assert reader.time_steps(3) == 3 and reader.time_steps(None) is None
    with pytest.raises(InvalidArgumentError, match="num_steps"):
        reader.time_steps(LENGTH + 1)
    assert reader.item_ids().shape == (NUM_ENVS, 4)
    assert reader.sampler is table.sampler and reader.rng is table.rng
    assert reader.sequence_length is None and reader.kind == "ReplayBuffer"


def test_a_reader_streams_batches_and_says_closed_once_its_table_is_closed():
    flat, table, storage = _parts()
    writer, reader = BufferWriter(flat, table, storage), BufferReader(flat, table, storage)
    for t in range(4):
        writer.add_batch(_step(t))
    stream = reader.stream(2, 2, convert=lambda s: s.data["action"].shape)
    try:
        assert next(stream) == (2, 2)
    finally:
        stream.close()
    assert not reader.closed
    table.close()
    assert reader.closed


# -- BufferPersistence --------------------------------------------------------------------


def test_persistence_state_dict_restores_another_buffers_parts():
    flat, table, storage = _parts(seed=1)
    writer = BufferWriter(flat, table, storage)
    for t in range(LENGTH + 3):  # wrapped rings
        writer.add_batch(_step(t))
    config = {"sampler": {"type": "Uniform", "config": {}}}
    saved = BufferPersistence(flat, table, storage, config)
    assert saved.stored_layout() == {"slot_offset": 0, "stored_steps": LENGTH}
    assert saved.recovered_steps_dropped == 0
    saved.check_saveable()
    saved.flush()  # RAM storage: nothing to flush
    flat2, table2, storage2 = _parts(seed=2)
    BufferPersistence(flat2, table2, storage2, config).load_state_dict(saved.state_dict())
    a = BufferReader(flat, table, storage).gather_all()
    b = BufferReader(flat2, table2, storage2).gather_all()
    for path in flat.paths:
        np.testing.assert_array_equal(a[path], b[path])
    assert table2.clocks.tolist() == table.clocks.tolist()


def test_persistence_config_is_a_copy_and_a_partial_ring_saves_its_stored_columns():
    flat, table, storage = _parts()
    config = {"sampler": {"type": "Uniform", "config": {}}}
    persistence = BufferPersistence(flat, table, storage, config)
    persistence.config()["sampler"] = None
    assert persistence.config() == config
    BufferWriter(flat, table, storage).add_batch(_step(0))
    assert persistence.stored_layout() == {"slot_offset": 0, "stored_steps": 1}


def test_persistence_from_saved_rebuilds_its_buffers_class(tmp_path):
    buf = rc.ReplayBuffer(SPEC, NUM_ENVS * LENGTH, NUM_ENVS, rng=0)
    for t in range(3):
        buf.add_batch(_step(t))
    path = buf.save(tmp_path / "ckpt")
    for back in (buf.persistence.from_saved(read_state(path)), buffer_from_saved(read_state(path))):
        assert type(back) is rc.ReplayBuffer and back.num_frames() == 3 * NUM_ENVS
    flat, table, storage = _parts()
    with pytest.raises(CheckpointError, match="without a buffer class"):
        BufferPersistence(flat, table, storage, {}).from_saved(read_state(path))


# -- the buffer: a front over them ------------------------------------------------------------


def test_the_buffer_is_a_front_over_its_collaborators():
    buf = rc.ReplayBuffer(SPEC, NUM_ENVS * LENGTH, NUM_ENVS, rng=0)
    public = [n for n in dir(rc.ReplayBuffer) if not n.startswith("_")]
    assert len(public) <= 25, public
    assert not set(MOVED) & set(public)
    assert isinstance(buf.writer, BufferWriter) and isinstance(buf.reader, BufferReader)
    assert isinstance(buf.persistence, BufferPersistence)
    assert buf.reader.table is buf.table and buf.writer.flat_spec is buf.reader.flat_spec
    assert buf.reader.storage is buf.storage
    # the hot paths are the collaborators' bound methods: no extra call frame per step
    assert buf.add_batch.__self__ is buf.writer and buf.sample.__self__ is buf.reader
    assert buf.add.__self__ is buf.writer
    buf.add_batch(_step(0))
    rc.ReplayBuffer.add_batch(buf, _step(1))  # the class's method delegates the same way
    assert rc.ReplayBuffer.sample(buf, 2).ids.shape == (2,)
    assert buf.num_frames() == 2 * NUM_ENVS
    assert rc.ReplayBuffer.from_config(buf.config()).config() == buf.config()
    assert not buf.closed
    buf.close()
    assert buf.closed and buf.reader.closed


@pytest.mark.parametrize("name", sorted(MOVED))
def test_every_moved_name_still_resolves_with_a_warning_naming_its_new_path(name):
    buf = rc.ReplayBuffer(SPEC, NUM_ENVS * LENGTH, NUM_ENVS, rng=0)
    owner = MOVED[name]
    expected = getattr(getattr(buf, owner), name)
    with pytest.warns(
        DeprecationWarning,
        match=rf"^ReplayBuffer\.{name} is deprecated: use buffer\.{owner}\.{name}$",
    ):
        value = getattr(buf, name)
    assert value == expected


def test_an_unknown_name_raises_attribute_error_without_a_warning():
    buf = rc.ReplayBuffer(SPEC, NUM_ENVS * LENGTH, NUM_ENVS)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        buf.nonsense  # noqa: B018
    assert not hasattr(buf, "nonsense")


def test_as_source_reads_a_buffers_reader_and_keeps_any_other_source():
    buf = rc.ReplayBuffer(SPEC, NUM_ENVS * LENGTH, NUM_ENVS)
    assert as_source(buf) is buf.reader
    assert as_source(buf.reader) is buf.reader
    transitions = rc.TransitionBuffer(10)
    assert as_source(transitions) is transitions
