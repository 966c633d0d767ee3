"""TrajectoryWriter's fast path (steps that repeat the last flat dict of arrays and numpy
scalars; items of history slices) stores and refuses exactly what the general path does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_writers import _server as writer_tables

import recollect.reverb as reverb
from recollect.errors import InvalidArgumentError, SpecError


def _server() -> reverb.Server:
    return writer_tables(max_size=1000)


def _items(client: reverb.Client, n: int) -> list[list[np.ndarray]]:
    return [s.data for s in client.sample("t", n, emit_timesteps=False)]


def test_appended_arrays_are_copied_so_the_caller_may_reuse_its_buffer() -> None:
    """Reverb copies a step at append; a writer that kept the caller's array stored the
    buffer's last contents for every step still unsent."""
    buf = np.zeros(3, np.float32)
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(2) as writer:
            for i in range(4):
                buf[:] = i  # one buffer, refilled every step
                writer.append({"obs": buf, "r": np.float32(i)})
                if i >= 1:
                    column = writer.history["obs"][-2:]
                    writer.create_item("t", 1.0, {"obs": column, "r": writer.history["r"][-1]})
            np.testing.assert_array_equal(writer.history["obs"][-1].numpy(), [3, 3, 3])
            buf[:] = -1
            np.testing.assert_array_equal(writer.history["obs"][-2:].numpy(), [[2] * 3, [3] * 3])
        items = _items(client, 3)
    for i, (obs, r) in enumerate(items, start=1):
        np.testing.assert_array_equal(obs, [[i - 1] * 3, [i] * 3])
        assert r == np.float32(i) and r.dtype == np.float32


_VALUE_FORMS = st.sampled_from(["array", "scalar", "view"])


def _value(i: int, form: str) -> object:
    """Step ``i``'s reward in one of the forms a column of float32 () accepts."""
    if form == "array":
        return np.array(i, np.float32)
    if form == "scalar":
        return np.float32(i)
    return np.arange(i, i + 2, dtype=np.float32)[:1].reshape(())  # a 0-d view


@settings(max_examples=25, deadline=None)
@given(
    forms=st.lists(_VALUE_FORMS, min_size=3, max_size=12),
    bad_at=st.one_of(st.none(), st.integers(1, 11)),
    extra_at=st.one_of(st.none(), st.integers(0, 11)),
)
def test_items_equal_the_reference_whatever_path_each_step_takes(
    forms: list[str], bad_at: int | None, extra_at: int | None
) -> None:
    """Steps switch between forms (fast path, general path, a new field, a refused dtype);
    every item holds the two steps it was made of (a reference model: the appended list)."""
    appended: list[tuple[np.ndarray, np.float32]] = []
    obs = np.zeros(2, np.float32)
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(2) as writer:
            for i, form in enumerate(forms):
                if i == bad_at:
                    with pytest.raises(SpecError, match=r"wrong dtype .* column \(.r.,\)"):
                        writer.append({"obs": obs, "r": np.float64(i)})
                obs[:] = (i, -i)
                step = {"obs": obs, "r": _value(i, form)}
                if i == extra_at:
                    step["extra"] = np.int8(1)
                writer.append(step)
                appended.append((obs.copy(), np.float32(i)))
                if len(appended) >= 2:
                    writer.create_item(
                        "t", 1.0, {"obs": writer.history["obs"][-2:], "r": writer.history["r"][-2:]}
                    )
        items = _items(client, len(appended) - 1)
    assert len(items) == len(appended) - 1
    for t, (got_obs, got_r) in enumerate(items, start=1):
        np.testing.assert_array_equal(got_obs, [appended[t - 1][0], appended[t][0]])
        np.testing.assert_array_equal(got_r, [appended[t - 1][1], appended[t][1]])
        assert got_obs.dtype == np.float32 and got_r.dtype == np.float32


def test_a_refused_fast_path_step_writes_nothing() -> None:
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(2) as writer:
            writer.append({"a": np.zeros(2, np.float32), "b": np.int32(0)})
            with pytest.raises(SpecError, match=r"incompatible shape provided for column \('a',\)"):
                writer.append({"a": np.zeros(3, np.float32), "b": np.int32(1)})
            assert writer.episode_steps == 1 and len(writer.history["b"]) == 1
            writer.append({"a": np.ones(2, np.float32), "b": np.int32(2)})
            writer.create_item("t", 1.0, {"b": writer.history["b"][-2:]})
        (item,) = _items(client, 1)
    np.testing.assert_array_equal(item[0], [0, 2])


def test_an_item_of_an_expired_history_slice_is_refused() -> None:
    with _server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(2) as writer:
            writer.append({"a": np.float32(0)})
            old = writer.history["a"][-1:]
            for i in range(1, 4):
                writer.append({"a": np.float32(i)})
            with pytest.raises(InvalidArgumentError, match="column 0: Column contains expired"):
                writer.create_item("t", 1.0, {"a": old})
            writer.create_item("t", 1.0, {"a": writer.history["a"][-2:][1:]})
        (item,) = _items(client, 1)
    np.testing.assert_array_equal(item[0], [3])
