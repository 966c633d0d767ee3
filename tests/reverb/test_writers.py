"""TrajectoryWriter (history slicing, squeeze, partial steps, signatures) and the legacy Writer."""

from __future__ import annotations

from multiprocessing.pool import ThreadPool

import numpy as np
import pytest

import recollect.reverb as reverb
from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import ArraySpec


def _server(signature=None, max_size: int = 100, max_times_sampled: int = 1) -> reverb.Server:
    table = reverb.Table(
        "t",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
        signature=signature,
    )
    return reverb.Server([table])


def _all(client: reverb.Client, n: int) -> list[reverb.ReplaySample]:
    return list(client.sample("t", n, emit_timesteps=False))


def test_history_slices_build_items_of_overlapping_steps() -> None:
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for i in range(5):
                writer.append({"obs": np.full(2, i, np.float32), "r": np.int32(10 * i)})
                if writer.episode_steps >= 2:
                    writer.create_item(
                        "t",
                        1.0,
                        {
                            "obs": writer.history["obs"][-2:],
                            "r": writer.history["r"][-1],  # squeezed: no time axis
                            "pair": writer.history["r"][[-2, -1]],
                        },
                    )
        samples = _all(client, 4)
    flat = [s.data for s in samples]
    # signature-less tables return flat columns in the trajectory's (sorted-key) order
    assert [d[0].shape for d in flat] == [(2, 2)] * 4
    np.testing.assert_array_equal(flat[0][0], [[0, 0], [1, 1]])
    assert [d[2].shape for d in flat] == [()] * 4 and [int(d[2]) for d in flat] == [10, 20, 30, 40]
    np.testing.assert_array_equal(flat[3][1], [30, 40])


def test_emit_timesteps_splits_items_into_steps() -> None:
    with _server() as server:
        client = server.localhost_client()
        with client.writer(max_sequence_length=3) as writer:
            writer.append_sequence([np.arange(3, dtype=np.int64), np.ones((3, 2), np.float32)])
            writer.create_item("t", num_timesteps=3, priority=1.0)
        steps = next(client.sample("t", 1))
    assert [int(s.data[0]) for s in steps] == [0, 1, 2]
    assert steps[0].data[1].shape == (2,)


def test_history_pads_new_fields_and_rejects_none_refs() -> None:
    with _server() as server:
        writer = server.localhost_client().trajectory_writer(5)
        writer.append({"a": 1})
        writer.append({"a": 2, "b": 3.0})
        assert len(writer.history["b"]) == 2
        with pytest.raises(ValueError, match="cannot contain any None data references"):
            writer.history["b"][:]
        assert writer.history["b"][-1].numpy() == 3.0
        writer.close()


def test_partial_steps_fill_one_step() -> None:
    with _server() as server:
        writer = server.localhost_client().trajectory_writer(5)
        writer.append({"x": 1}, partial_step=True)
        assert writer.episode_steps == 0
        with pytest.raises(ValueError, match="has already been set in the active step"):
            writer.append({"x": 2})
        writer.append({"y": 2.0})
        assert writer.episode_steps == 1
        assert writer.history["y"][0].numpy() == 2.0 and writer.history["x"][0].numpy() == 1
        writer.close()


def test_column_dtype_and_shape_are_fixed_by_the_first_value() -> None:
    with _server() as server:
        writer = server.localhost_client().trajectory_writer(2)
        writer.append({"a": np.int64(1)})
        with pytest.raises(
            ValueError,
            match=r"Tensor of wrong dtype provided for column \('a',\)\. "
            r"Got double but expected int64\.",
        ) as err:
            writer.append({"a": 1.5})
        assert isinstance(err.value, SpecError) and "Hint" in str(err.value)
        with pytest.raises(ValueError, match="Tensor of incompatible shape provided for column"):
            writer.append({"a": np.zeros(2, np.int64)})
        writer.close()


def test_item_against_table_signature() -> None:
    sig = {"a": ArraySpec((2, 3), np.float32, "a")}
    with _server(signature=sig) as server:
        client = server.localhost_client()
        writer = client.trajectory_writer(2)
        writer.append({"a": np.zeros(3, np.float64)})
        writer.append({"a": np.zeros(3, np.float64)})
        with pytest.raises(
            ValueError,
            match="The table expects column 0 to be a float "
            r"\[2,3\] tensor but got a double \[2,3\] tensor",
        ):
            writer.create_item("t", 1.0, {"a": writer.history["a"][-2:]})
        writer.close()
        w2 = client.trajectory_writer(2)
        w2.append({"a": np.zeros(3, np.float32)})
        w2.append({"a": np.ones(3, np.float32)})
        w2.create_item("t", 1.0, {"a": w2.history["a"][-2:]})
        w2.flush()
        sample = next(client.sample("t", 1, emit_timesteps=False, unpack_as_table_signature=True))
        assert set(sample.data) == {"a"} and sample.data["a"].shape == (2, 3)


def test_legacy_writer_checks_signature_per_step() -> None:
    with _server(signature=ArraySpec((2,), np.int64)) as server:
        client = server.localhost_client()
        with pytest.raises(
            ValueError, match="saw a tensor of dtype double, shape \\[2\\], but expected tensor"
        ):
            client.insert(np.zeros(2, np.float64), {"t": 1.0})
        client.insert(np.zeros(2, np.int64), {"t": 1.0})
        assert server.core.tables["t"].info.current_size == 1


def test_expired_references_are_rejected() -> None:
    with _server() as server:
        writer = server.localhost_client().trajectory_writer(2)
        writer.append({"a": 0})
        old = writer.history["a"][0]
        writer.append({"a": 1})
        writer.append({"a": 2})
        with pytest.raises(ValueError, match="expired"):
            writer.create_item("t", 1.0, old)
        with pytest.raises(RuntimeError, match="expired data references"):
            old.numpy()
        writer.close()


def test_end_episode_clears_history_and_counts_episodes() -> None:
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(2) as writer:
            for _ in range(3):
                writer.append([1])
                writer.create_item("t", 1.0, writer.history[0][-1:])
                writer.end_episode()
                assert writer.episode_steps == 0
                with pytest.raises(IndexError):
                    writer.history[0][-1]
        assert server.core.tables["t"].info.num_episodes == 3


def test_legacy_writer_arguments() -> None:
    with _server() as server:
        client = server.localhost_client()
        with pytest.raises(ValueError, match=r"max_sequence_length \(0\) must be a positive"):
            client.writer(0)
        with pytest.raises(ValueError, match="chunk_length"):
            client.writer(2, chunk_length=3)
        writer = client.writer(2)
        writer.append([1])
        with pytest.raises(ValueError, match=r"num_timesteps \(2\) must be <= the steps available"):
            writer.create_item("t", 2, 1.0)
        writer.close()
        with pytest.raises(InvalidArgumentError, match="close\\(\\) has already been called"):
            writer.close()


def test_64_writer_threads_insert_every_item() -> None:
    with _server(max_size=10_000) as server:
        client = server.localhost_client()

        def write(i: int) -> None:
            with client.trajectory_writer(2) as writer:
                for t in range(10):
                    writer.append({"id": np.int64(i), "t": np.int64(t)})
                    writer.create_item(
                        "t", 1.0, {"id": writer.history["id"][-1], "t": writer.history["t"][-1]}
                    )

        with ThreadPool(64) as pool:
            pool.map(write, range(64))
        got = sorted((int(s.data[0]), int(s.data[1])) for s in _all(client, 640))
    assert got == sorted((i, t) for i in range(64) for t in range(10))


def test_steps_of_changing_structures_put_each_field_in_its_own_column() -> None:
    """The writer reuses the column order of a structure seen at the previous step; a
    structure that adds, omits or reorders fields still lands each field in its column."""
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(num_keep_alive_refs=8) as writer:
            writer.append({"b": np.int32(0)})  # b is column 0
            writer.append({"a": np.float32(1), "b": np.int32(1)})  # leaves a, b: columns 1, 0
            writer.append({"b": np.int32(2), "a": np.float32(2)})  # the same structure
            writer.append({"b": np.int32(3)})  # a omitted: None at step 3
            writer.append({"a": np.float32(4), "b": np.int32(4)})
            writer.append({"a": np.float32(5), "b": np.int32(5)})
            np.testing.assert_array_equal(writer.history["b"][-6:].numpy(), np.arange(6))
            np.testing.assert_array_equal(writer.history["a"][-2:].numpy(), [4.0, 5.0])
            np.testing.assert_array_equal(writer.history["a"][1:3].numpy(), [1.0, 2.0])
            with pytest.raises(ValueError, match="cannot contain any None data references"):
                writer.history["a"][-3:]
            with pytest.raises(ValueError, match="cannot contain any None data references"):
                writer.history["a"][0:2]
            writer.create_item(
                "t", 1.0, {"a": writer.history["a"][1:3], "b": writer.history["b"][-1]}
            )
        (sample,) = _all(client, 1)
    np.testing.assert_array_equal(sample.data[0], np.array([1.0, 2.0], np.float32))
    assert sample.data[1].dtype == np.int32 and int(sample.data[1]) == 5


def test_a_column_of_references_of_two_fields_is_refused() -> None:
    with _server() as server:
        with server.localhost_client().trajectory_writer(2) as writer:
            writer.append({"a": np.int32(0), "b": np.int32(1)})
            writer.append({"a": np.int32(2), "b": np.int32(3)})
            mixed = reverb.TrajectoryColumn([*writer.history["a"][-1:], *writer.history["b"][-1:]])
            with pytest.raises(InvalidArgumentError, match=r"Column 0 .* mixes references"):
                writer.create_item("t", 1.0, [mixed])
            first_b = writer.history["b"][0]
            writer.append({"a": np.int32(4), "b": np.int32(5)})  # step 0 expires (keep 2)
            with pytest.raises(InvalidArgumentError, match=r"column 1: Column contains expired"):
                writer.create_item("t", 1.0, [writer.history["a"][-1], first_b])
