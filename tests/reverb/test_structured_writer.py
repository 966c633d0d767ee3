"""reverb.structured_writer: conditions, patterns, partial steps, episodes, signatures, errors.

The expected item contents were produced by dm-reverb 0.14.0 (Python 3.11, TF 2.15)
running the same calls (a script wrote each table's items; they are copied here as
literals). A hypothesis test checks slices against a plain-list reference model.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect.reverb as reverb
from recollect.errors import InvalidArgumentError, SpecError
from recollect.reverb import structured_writer as sw
from recollect.reverb.errors import ReverbError

C = sw.Condition
TABLES = ("t0", "t1", "t2")
LAST = sw.pattern_from_transform(None, lambda x: x[-1])
STEP = {"a": None, "b": None}
REF = sw.create_reference_step(STEP)


@pytest.fixture(scope="module")
def client() -> Iterator[reverb.Client]:
    with reverb.Server([reverb.Table.queue(t, 1000) for t in TABLES]) as server:
        yield server.localhost_client()


@pytest.fixture(autouse=True)
def _empty_tables(client: reverb.Client) -> Iterator[None]:
    yield
    for t in TABLES:
        client.reset(t)


def _items(client: reverb.Client, table: str = "t0", dtypes: list | None = None) -> list[list]:
    """Each item as [column values as lists..., priority], in insertion order (the queue is
    emptied); ``dtypes`` gets the column dtypes of each item."""
    n = client.server_info()[table].current_size
    if not n:
        return []
    samples = list(client.sample(table, n, emit_timesteps=False))
    if dtypes is not None:
        dtypes.extend([str(np.asarray(c).dtype) for c in s.data] for s in samples)
    return [[np.asarray(c).tolist() for c in s.data] + [s.info.priority] for s in samples]


def _run(client, configs, steps, end=True, clear_buffers=True):
    writer = client.structured_writer(configs)
    for step in steps:
        if isinstance(step, tuple) and step[0] == "partial":
            writer.append(step[1], partial_step=True)
        elif isinstance(step, tuple) and step[0] == "end":
            writer.end_episode(clear_buffers=step[1])
        else:
            writer.append(step)
    if end:
        writer.end_episode(clear_buffers=clear_buffers)
    else:
        writer.flush()
    return writer


# dm-reverb 0.14.0: the steps (appended values 0..9, pattern x[-1]) that made an item.
CONDITIONS = [
    (C.step_index() <= 2, [0, 1, 2]),
    (C.step_index() >= 5, [5, 6, 7, 8, 9]),
    (C.step_index() == 3, [3]),
    (C.step_index() != 3, [0, 1, 2, 4, 5, 6, 7, 8, 9]),
    (C.step_index() < 3, [0, 1, 2]),
    (C.step_index() > 6, [7, 8, 9]),
    (C.step_index() % 3 == 0, [0, 3, 6, 9]),
    (C.step_index() % 3 != 0, [1, 2, 4, 5, 7, 8]),
    (C.step_index() % 3 >= 1, [1, 2, 3, 4, 5, 6, 7, 8, 9]),  # Reverb drops the modulus
    (C.step_index() % 4 < 2, [0, 1]),  # here too: step_index < 2
    (C.step_index() % 0 == 0, [0]),  # a zero modulus is no modulus
    (C.steps_since_applied() >= 4, [3, 7]),
    (C.steps_since_applied() >= 3, [2, 5, 8]),
    (C.steps_since_applied() == 2, [1, 3, 5, 7, 9]),
    (C.steps_since_applied() % 2 == 0, [1, 3, 5, 7, 9]),
    (C.is_end_episode(), [9]),
]


@pytest.mark.parametrize(("condition", "want"), CONDITIONS)
def test_each_condition_form_selects_the_steps_dm_reverb_selects(client, condition, want):
    _run(client, [sw.create_config(LAST, "t0", [condition])], [np.int64(i) for i in range(10)])
    assert _items(client) == [[i, 1.0] for i in want]


def test_conditions_combine_with_and(client):
    conditions = [C.step_index() >= 2, C.step_index() % 2 == 0]
    _run(client, [sw.create_config(LAST, "t0", conditions)], [np.int64(i) for i in range(10)])
    assert _items(client) == [[i, 1.0] for i in (2, 4, 6, 8)]


def test_end_episode_condition_needs_the_history_its_pattern_reads(client):
    config = sw.create_config(
        sw.pattern_from_transform(None, lambda x: x[-3:]), "t0", [C.is_end_episode()]
    )
    _run(client, [config], [np.int64(i) for i in range(5)])
    assert _items(client) == [[[2, 3, 4], 1.0]]
    _run(client, [config], [np.int64(i) for i in range(2)])  # two steps: no item
    assert _items(client) == []


STEPS = [{"a": np.float32(i), "b": np.array([i, -i], np.int32)} for i in range(8)]

# dm-reverb 0.14.0: column x of each item, pattern {"x": <slice of a>}, 8 steps.
SLICES = [
    (REF["a"][-3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    (
        REF["a"][-2:],
        [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0], [4.0, 5.0], [5.0, 6.0], [6.0, 7.0]],
    ),
    (REF["a"][-3:-1], [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0], [4.0, 5.0], [5.0, 6.0]]),
    (REF["a"][-5::2], [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0], [2.0, 4.0, 6.0], [3.0, 5.0, 7.0]]),
    (REF["a"][-4:-1:2], [[0.0, 2.0], [1.0, 3.0], [2.0, 4.0], [3.0, 5.0], [4.0, 6.0]]),
    (REF["a"][-6::3], [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
    (REF["a"][-1:], [[float(i)] for i in range(8)]),
    (REF["a"][-3:0], [[float(i), i + 1.0, i + 2.0] for i in range(6)]),
]


@pytest.mark.parametrize(("node", "want"), SLICES)
def test_slices_with_start_stop_step_match_dm_reverb(client, node, want):
    _run(client, [sw.create_config({"x": node}, "t0")], STEPS)
    dtypes: list = []
    assert _items(client, dtypes=dtypes) == [[x, 1.0] for x in want]
    assert dtypes == [["float32"]] * len(want)


def test_per_column_patterns_nest_and_slice_each_field(client):
    pattern = {"x": REF["a"][-3], "y": REF["b"][-2:], "z": [REF["b"][-1], REF["a"][-1:]]}
    config = sw.create_config(pattern, "t0")
    _run(client, [config], STEPS)
    # dm-reverb 0.14.0 (columns in dm-tree order: x, y, z[0], z[1]):
    want = [
        [float(i), [[i + 1, -i - 1], [i + 2, -i - 2]], [i + 2, -i - 2], [i + 2.0], 1.0]
        for i in range(6)
    ]
    dtypes: list = []
    assert _items(client, dtypes=dtypes) == want
    assert dtypes == [["float32", "int32", "int32", "float32"]] * 6
    assert sw.unpack_pattern(config) == pattern


def test_constant_priority(client):
    config = sw.create_config(
        [REF["a"][-1]], "t0", [C.step_index() < 2], priority=sw.constant_priority_fn(2.5)
    )
    _run(client, [config], STEPS)
    assert _items(client) == [[0.0, 2.5], [1.0, 2.5]]


def test_td_error_priority_mixes_max_and_mean_of_abs_td(client):
    td = sw.td_error(0.9, STEP, lambda s: s["a"])
    config = sw.create_config(
        {"t": REF["a"][-3:], "b": REF["b"][-1]}, "t0", [C.step_index() % 2 == 0], priority=td
    )
    steps = [{"a": np.float32((-1) ** i * i), "b": np.array([i, -i], np.int32)} for i in range(8)]
    _run(client, [config], steps)
    got = _items(client)
    # dm-reverb 0.14.0: priorities 1.9, 3.9, 5.9 (0.9 * max + 0.1 * mean of |t|).
    assert [g[:2] for g in got] == [
        [[2, -2], [0.0, -1.0, 2.0]],
        [[4, -4], [2.0, -3.0, 4.0]],
        [[6, -6], [4.0, -5.0, 6.0]],
    ]
    assert [g[2] for g in got] == pytest.approx([1.9, 3.9, 5.9])


def test_td_error_priority_without_its_field_in_the_item_is_zero(client):
    td = sw.td_error(0.9, STEP, lambda s: s["a"])
    _run(client, [sw.create_config({"t": REF["b"][-1]}, "t0", [C.step_index() < 2], td)], STEPS)
    assert _items(client) == [[[0, 0], 0.0], [[1, -1], 0.0]]  # dm-reverb 0.14.0


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array([1.0, 2.0]), "TD Error expects a scalar tensor"),
        (np.int8(3), "TD Error expects a double/float/int tensor"),
    ],
)
def test_td_error_field_must_be_a_numeric_scalar(client, value, match):
    td = sw.td_error(0.5, STEP, lambda s: s["b"])
    writer = client.structured_writer(
        [sw.create_config([REF["a"][-1], REF["b"][-1]], "t0", [], td)]
    )
    with pytest.raises(InvalidArgumentError, match=match):
        writer.append({"a": 1, "b": value})


def test_multiple_configs_write_their_own_tables_on_one_writer(client):
    configs = [
        sw.create_config({"x": REF["a"][-1]}, "t0", [C.step_index() % 2 == 0]),
        sw.create_config({"y": REF["a"][-2:]}, "t1", [C.step_index() % 3 == 0]),
        sw.create_config([REF["b"][-1]], "t0", [C.is_end_episode()]),
    ]
    _run(client, configs, STEPS)
    # dm-reverb 0.14.0:
    assert _items(client, "t0") == [[0.0, 1.0], [2.0, 1.0], [4.0, 1.0], [6.0, 1.0], [[7, -7], 1.0]]
    assert _items(client, "t1") == [[[2.0, 3.0], 1.0], [[5.0, 6.0], 1.0]]


def test_round_robin_over_tables(client):
    configs = [
        sw.create_config(LAST, t, [C.step_index() % len(TABLES) == i]) for i, t in enumerate(TABLES)
    ]
    _run(client, configs, [np.int32(i) for i in range(6)])
    for i, t in enumerate(TABLES):
        assert _items(client, t) == [[i, 1.0], [i + 3, 1.0]]


def test_end_episode_clears_history_and_restarts_step_index(client):
    config = sw.create_config([REF["a"][-2:]], "t0", [C.step_index() >= 0])
    _run(client, [config], [*STEPS[:3], ("end", True), *STEPS[3:6]])
    assert _items(client) == [  # dm-reverb 0.14.0
        [[0.0, 1.0], 1.0],
        [[1.0, 2.0], 1.0],
        [[3.0, 4.0], 1.0],
        [[4.0, 5.0], 1.0],
    ]


def test_items_span_episodes_when_buffers_are_kept(client):
    config = sw.create_config([REF["a"][-2:]], "t0")
    _run(client, [config], [*STEPS[:3], ("end", False), *STEPS[3:6]])
    assert _items(client) == [[[float(i), i + 1.0], 1.0] for i in range(5)]  # dm-reverb 0.14.0


def test_step_index_restarts_even_when_buffers_are_kept(client):
    config = sw.create_config([REF["a"][-3:]], "t0", [C.step_index() == 1])
    _run(client, [config], [*STEPS[:3], ("end", False), *STEPS[3:6]])
    assert _items(client) == [[[2.0, 3.0, 4.0], 1.0]]  # dm-reverb 0.14.0


def test_steps_since_applied_carries_over_episodes(client):
    config = sw.create_config([REF["a"][-1]], "t0", [C.steps_since_applied() >= 2])
    _run(client, [config], [*STEPS[:3], ("end", True), *STEPS[3:7]])
    assert _items(client) == [[1.0, 1.0], [3.0, 1.0], [5.0, 1.0]]  # dm-reverb 0.14.0


# dm-reverb 0.14.0: the `a` of the steps where the data condition on `b` held.
DATA_B = [0, 1, 2, 3, -1, 1]
DATA_CONDITIONS = [
    (lambda d: d["b"] == 1, [1, 5]),
    (lambda d: d["b"] != 1, [0, 2, 3, 4]),
    (lambda d: d["b"] < 1, [0, 4]),
    (lambda d: d["b"] <= 1, [0, 1, 4, 5]),
    (lambda d: d["b"] >= 1, [1, 2, 3, 5]),
    (lambda d: d["b"] % 2 == 1, [1, 3, 5]),  # C's rest: -1 % 2 is -1
]


@pytest.mark.parametrize(("condition_fn", "want"), DATA_CONDITIONS)
def test_data_conditions_compare_a_step_field(client, condition_fn, want):
    config = sw.create_config([REF["a"][-1]], "t0", [condition_fn(C.data(STEP))])
    steps = [{"a": np.int32(i), "b": np.int8(v)} for i, v in enumerate(DATA_B)]
    _run(client, [config], steps)
    assert _items(client) == [[i, 1.0] for i in want]


def test_data_condition_on_a_field_the_pattern_does_not_read(client):
    config = sw.create_config({"o": REF["a"][-2]}, "t0", [C.data(STEP)["b"] > 10])
    steps = [{"a": np.int32(i), "b": np.int64(v)} for i, v in enumerate([11, 10, 11, 9, 12, 13])]
    _run(client, [config], steps)
    assert _items(client) == [[1, 1.0], [3, 1.0], [4, 1.0]]  # dm-reverb 0.14.0


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([np.bool_(v) for v in (1, 0, 0, 1, 0)], [0, 3]),
        ([np.array([v], np.int32) for v in (1, 0, 1)], [0, 2]),  # one element counts
        ([np.array([v, v], np.int32) for v in (1, 0, 1)], []),  # not a scalar: never
        ([np.float32(v) for v in (1, 0, 1)], []),  # not an integer: never
        ([None, np.int32(1)], [1]),  # not given: never
        ([np.uint64(2**32 + 1), np.uint64(1)], [0, 1]),  # cast to int32 as C++ does
    ],
)
def test_data_condition_reads_scalar_integers_and_bools_only(client, values, want):
    config = sw.create_config([REF["a"][-1]], "t0", [C.data(STEP)["b"] == 1])
    _run(client, [config], [{"a": np.int32(i), "b": v} for i, v in enumerate(values)])
    assert _items(client) == [[i, 1.0] for i in want]  # dm-reverb 0.14.0


PARTIAL = [
    sw.create_config({"a": REF["a"][-1], "b": REF["b"][-1]}, "t0"),
    sw.create_config({"a": REF["a"][-2:]}, "t1"),
]


def _half(i, field):
    if field == "a":
        return {"a": np.float32(i), "b": None}
    return {"a": None, "b": np.array([i, i], np.int32)}


def test_partial_steps_make_items_once_the_fields_are_there(client):
    steps = []
    for i in range(3):
        steps += [("partial", _half(i, "a")), _half(i, "b")]
    _run(client, PARTIAL, steps)
    # dm-reverb 0.14.0:
    assert _items(client, "t0") == [[float(i), [i, i], 1.0] for i in range(3)]
    assert _items(client, "t1") == [[[0.0, 1.0], 1.0], [[1.0, 2.0], 1.0]]


def test_an_open_step_still_makes_the_items_it_has_fields_for(client):
    steps = [("partial", _half(0, "a")), _half(0, "b"), ("partial", _half(1, "a"))]
    writer = _run(client, PARTIAL, steps)
    assert not writer.step_is_open
    # dm-reverb 0.14.0:
    assert _items(client, "t0") == [[0.0, [0, 0], 1.0]]
    assert _items(client, "t1") == [[[0.0, 1.0], 1.0]]


def test_steps_where_a_field_was_not_given_make_no_item_over_them(client):
    steps = [{"a": np.float32(i) if i != 1 else None, "b": None} for i in range(4)]
    _run(client, [sw.create_config({"a": REF["a"][-2:]}, "t0")], steps)
    assert _items(client) == [[[2.0, 3.0], 1.0]]  # dm-reverb 0.14.0


def test_a_config_makes_at_most_one_item_per_step(client):
    config = sw.create_config({"a": REF["a"][-2:]}, "t0", [C.steps_since_applied() >= 1])
    steps = [
        ("partial", {"a": None, "b": np.array([0, 0], np.int32)}),
        {"a": np.float32(0), "b": None},
        {"a": np.float32(1), "b": np.array([0, 0], np.int32)},
    ]
    _run(client, [config], steps)
    assert _items(client) == [[[0.0, 1.0], 1.0]]  # dm-reverb 0.14.0


def test_step_is_open_follows_partial_appends(client):
    writer = client.structured_writer(
        [sw.create_config([r[-1] for r in sw.create_reference_step([None] * 3)], "t0")]
    )
    assert not writer.step_is_open
    writer.append([1, 1, 1])
    assert not writer.step_is_open
    writer.append([None, 2, None], partial_step=True)
    assert writer.step_is_open
    writer.append([None, None, 2], partial_step=True)
    assert writer.step_is_open
    writer.append([2, None, None])
    assert not writer.step_is_open
    writer.append([None, 3, None], partial_step=True)
    writer.end_episode()
    assert not writer.step_is_open
    assert _items(client) == [[1, 1, 1, 1.0], [2, 2, 2, 1.0]]


def test_fields_no_config_reads_are_not_stored_or_checked(client):
    steps = [{"a": np.float32(0), "b": np.int32(1)}, {"a": np.float32(1), "b": np.float64(2)}]
    _run(client, [sw.create_config({"a": REF["a"][-1]}, "t0")], steps)
    assert _items(client) == [[0.0, 1.0], [1.0, 1.0]]  # dm-reverb 0.14.0: no dtype error


def test_context_manager_flushes_and_closes(client):
    with client.structured_writer([sw.create_config(LAST, "t0")]) as writer:
        writer.append(np.int32(5))
    assert _items(client) == [[5, 1.0]]


# --- errors ------------------------------------------------------------------------------


def test_append_errors_name_the_field_path(client):
    writer = client.structured_writer([sw.create_config({"a": REF["a"][-1]}, "t0")])
    writer.append({"a": np.float32(0), "b": 1})
    with pytest.raises(
        SpecError,
        match=r"Tensor of wrong dtype provided for column 0 \(path=\('a',\)\)\. Got int32 but "
        r"expected float\.",
    ):
        writer.append({"a": np.int32(1), "b": 1})
    with pytest.raises(
        SpecError,
        match=r"Tensor of incompatible shape provided for column 0 \(path=\('a',\)\)\. Got \[3\] "
        r"which is incompatible with \[\]\.",
    ):
        writer.append({"a": np.zeros(3, np.float32), "b": 1})
    with pytest.raises(
        InvalidArgumentError, match=r"Flattened data has an unexpected length, got 1 but wanted 2"
    ):
        writer.append({"a": np.float32(1)})
    writer.append({"a": np.float32(1), "b": 1})  # nothing was half-written
    writer.flush()
    assert _items(client) == [[0.0, 1.0], [1.0, 1.0]]


def test_a_field_given_twice_in_one_step_is_a_runtime_error(client):
    writer = client.structured_writer([sw.create_config({"a": REF["a"][-1]}, "t0")])
    writer.append({"a": 0.0, "b": None}, partial_step=True)
    with pytest.raises(
        ReverbError, match=r"A value for column 0 was provided by multiple Append/AppendPartial"
    ) as info:
        writer.append({"a": 1.0, "b": 1})
    assert isinstance(info.value, RuntimeError)


def _ref(n=1):
    return sw.create_reference_step([None] * n)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (sw.create_config({"a": REF["a"][0:]}, "t0"), r"`start` must be < 0 but got 0\."),
        (sw.create_config({"a": REF["a"][0]}, "t0"), r"`stop` must be < 0 when `start` isn't"),
        (sw.create_config({"a": REF["a"][-2:1]}, "t0"), r"`stop` must be <= 0 but got 1\."),
        (sw.create_config({"a": REF["a"][-2:-3]}, "t0"), r"`stop` \(-3\) must be > `start` \(-2\)"),
        (sw.create_config({"a": REF["a"][-4::0]}, "t0"), r"`step` must be > 0 but got 0\."),
        (sw.create_config({"a": REF["a"][-4::-1]}, "t0"), r"`step` must be > 0 but got -1\."),
        (sw.create_config({"a": REF["a"][:-2:2]}, "t0"), r"`step` must only be set when `start`"),
        (sw.create_config(LAST, "t0", [C.step_index() % -2 == 0]), r"`mod_eq.mod` must be > 0"),
        (sw.create_config(LAST, "t0", [C.step_index() % 2 == -1]), r"`mod_eq.eq` must be >= 0"),
        (sw.create_config(LAST, ""), r"`table` must not be empty\."),
        (sw.create_config({}, "t0"), r"`flat` must not be empty\."),
        (
            sw.create_config(LAST, "t0", [sw.ConditionProto(is_end_episode=True, eq=0)]),
            r"must use `eq=1` when using `is_end_episode`",
        ),
        (
            sw.create_config(LAST, "t0", [sw.ConditionProto(eq=1)]),
            r"must specify a value for `left`",
        ),
        (
            sw.create_config(LAST, "t0", [sw.ConditionProto(step_index=True)]),
            r"must specify a value for `cmp`",
        ),
    ],
)
def test_invalid_configs_are_refused_by_client_structured_writer(client, config, match):
    with pytest.raises(
        InvalidArgumentError, match=r"Invalid configuration at position 1: .*" + match
    ):
        client.structured_writer([sw.create_config(LAST, "t0"), config])


def test_no_configs_is_refused(client):
    with pytest.raises(InvalidArgumentError, match=r"At least one config must be provided\."):
        client.structured_writer([])


@pytest.mark.parametrize("key", ["x", 1.5, None])
def test_reference_steps_take_ints_and_slices_only(key):
    with pytest.raises(InvalidArgumentError, match=r"Key must be int or slice by got"):
        REF["a"][key]


def test_flush_refuses_a_negative_count(client):
    writer = client.structured_writer([sw.create_config(LAST, "t0")])
    with pytest.raises(InvalidArgumentError, match=r"block_until_num_items must be >= 0, got -1"):
        writer.flush(-1)


def test_patterns_and_data_conditions_past_the_step_width_make_no_items(client):
    configs = [
        sw.create_config([REF["a"][-1]], "t0", [C.data([None, None, None])[2] == 1]),
        sw.create_config(_ref(5)[4][-1], "t1"),
    ]
    _run(client, configs, [{"a": 1.0, "b": 1}])
    assert _items(client, "t0") == _items(client, "t1") == []  # dm-reverb 0.14.0


# --- reference model ---------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(-6, -1),
    stop_offset=st.integers(1, 6),
    step=st.integers(1, 3),
    num_steps=st.integers(0, 9),
)
def test_slices_match_python_slicing_of_the_step_list(start, stop_offset, step, num_steps):
    stop = min(start + stop_offset, 0)
    with reverb.Server([reverb.Table.queue("q", 100)]) as server:
        client = server.localhost_client()
        node = sw.create_reference_step(None)[start : stop or None : step]
        writer = client.structured_writer([sw.create_config(node, "q")])
        for i in range(num_steps):
            writer.append(np.int64(i))
        writer.end_episode()
        n = client.server_info()["q"].current_size
        got = [
            np.asarray(s.data[0]).tolist()
            for s in (client.sample("q", n, emit_timesteps=False) if n else [])
        ]
    history = list(range(num_steps))
    want = [
        history[: t + 1][start : stop or None : step] for t in range(num_steps) if t + 1 >= -start
    ]
    assert got == want


# --- signatures --------------------------------------------------------------------------


SPEC = {"a": np.zeros([3, 3], np.float32), "b": {"c": np.zeros([2, 2], np.int8)}}
SREF = sw.create_reference_step(SPEC)


def _shapes(signature):
    """(shape, dtype name, name) per leaf, of tf.TensorSpec or our TensorSpec leaves."""
    return {
        k: (tuple(v.shape), np.dtype(getattr(v.dtype, "as_numpy_dtype", v.dtype)).name, v.name)
        for k, v in signature.items()
    }


def test_infer_signature_gives_tf_specs_once_tensorflow_is_imported():
    tf = pytest.importorskip("tensorflow")
    config = sw.create_config({"older": SREF["a"][-3:-1], "y": {"c": SREF["b"]["c"][-2]}}, "t")
    assert sw.infer_signature([config], SPEC) == {
        "older": tf.TensorSpec([2, 3, 3], tf.float32, "older"),
        "y": {"c": tf.TensorSpec([2, 2], tf.int8, "y/c")},
    }


def test_infer_signature_adds_the_time_axis_of_slices():
    config = sw.create_config(
        {"older": SREF["a"][-3:-1], "last": SREF["a"][-1], "every2": SREF["a"][-5::2]}, "t"
    )
    assert _shapes(sw.infer_signature([config], SPEC)) == {
        "older": ((2, 3, 3), "float32", "older"),
        "last": ((3, 3), "float32", "last"),
        "every2": ((3, 3, 3), "float32", "every2"),  # Reverb 0.14 said 2 here (fixed later)
    }


def test_infer_signature_leaves_the_time_axis_open_when_configs_differ():
    configs = [
        sw.create_config({"x": SREF["a"][-3:-1], "z": SREF["b"]["c"][-4:]}, "t"),
        sw.create_config({"x": SREF["a"][-3:], "z": SREF["b"]["c"][-8::2]}, "t"),
    ]
    assert _shapes(sw.infer_signature(configs, SPEC)) == {
        "x": ((None, 3, 3), "float32", "x"),
        "z": ((4, 2, 2), "int8", "z"),
    }


def test_infer_signature_errors():
    pattern = {"x": SREF["a"][-3:]}
    with pytest.raises(InvalidArgumentError, match=r"At least one config must be provided\."):
        sw.infer_signature([], SPEC)
    with pytest.raises(
        InvalidArgumentError,
        match=r"All configs must target the same table but provided configs included a, b\.",
    ):
        sw.infer_signature([sw.create_config(pattern, "b"), sw.create_config(pattern, "a")], SPEC)
    with pytest.raises(
        InvalidArgumentError, match=r"All configs must have exactly the same pattern_structure\."
    ):
        sw.infer_signature(
            [
                sw.create_config({"x": SREF["a"][-1]}, "a"),
                sw.create_config({"y": SREF["a"][-1]}, "a"),
            ],
            SPEC,
        )
    spec = {
        "a": np.zeros([], np.float32),
        "b": np.zeros([], np.float64),
        "c": np.zeros([1], np.float32),
    }
    ref = sw.create_reference_step(spec)
    with pytest.raises(InvalidArgumentError, match=r"multiple dtypes at \('x',\)\. Got"):
        sw.infer_signature(
            [
                sw.create_config({"x": ref["a"][-1]}, "a"),
                sw.create_config({"x": ref["b"][-1]}, "a"),
            ],
            spec,
        )
    with pytest.raises(InvalidArgumentError, match=r"incompatible shapes at \('x',\)\. Got"):
        sw.infer_signature(
            [
                sw.create_config({"x": ref["a"][-1]}, "a"),
                sw.create_config({"x": ref["c"][-1]}, "a"),
            ],
            spec,
        )


def test_an_inferred_signature_is_accepted_by_a_table_and_its_items_fit():
    configs = [
        sw.create_config({"obs": SREF["a"][-2:], "c": SREF["b"]["c"][-1]}, "sig"),
        sw.create_config({"obs": SREF["a"][-3:], "c": SREF["b"]["c"][-1]}, "sig"),
    ]
    signature = sw.infer_signature(configs, SPEC)
    table = reverb.Table.queue("sig", 100, signature=signature)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        with client.structured_writer(configs) as writer:
            for i in range(3):
                writer.append(
                    {"a": np.full([3, 3], i, np.float32), "b": {"c": np.full([2, 2], i, np.int8)}}
                )
        assert client.server_info()["sig"].current_size == 3
        samples = list(
            client.sample("sig", 3, emit_timesteps=False, unpack_as_table_signature=True)
        )
    assert [s.data["obs"].shape for s in samples] == [(2, 3, 3), (2, 3, 3), (3, 3, 3)]
    assert all(s.data["c"].dtype == np.int8 for s in samples)
