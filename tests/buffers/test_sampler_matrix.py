"""Every public sampler of ReplayBuffer x spec with / without ``is_last`` x ``sequence_length``
x ``num_steps`` x fresh / restored: it samples exactly what a plain list of steps says, or it
refuses at construction with the documented error, never at ``sample`` (issue 35, item 1).

Reference: each row's steps as a Python list; a window ``(row, start)`` of ``n`` steps is
valid when its steps are among the row's newest ``max_length`` and, with ``is_last`` in the
spec, no step but its last ends an episode. Random samplers are checked draw by draw
(data, ids, probabilities, weights) and by chi-square over the valid windows; deterministic
ones (``max_times_sampled=1``: each window once) by the whole order they return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from chi_square import assert_fits
from recollect.errors import InvalidArgumentError, NotEnoughDataError

MAX_LENGTH = 8  # steps per row
ENDS = (4, 9)  # times whose step has is_last (specs with an is_last leaf)
FIRST, SECOND = range(0, 9), range(9, 13)  # written before / after the save and load
ALPHA, BETA, EPSILON = 0.6, 0.4, 1e-6

SAMPLERS: dict[str, Callable[[], rc.Sampler]] = {
    "uniform": rc.Uniform,
    "prioritized": lambda: rc.Prioritized(priority_exponent=ALPHA, epsilon=EPSILON),
    "fifo": rc.Fifo,
    "lifo": rc.Lifo,
    "minheap": rc.MinHeap,
    "maxheap": rc.MaxHeap,
}
FIXED_LENGTH = {"prioritized", "minheap", "maxheap"}  # score windows of sequence_length
ORDERED = {"fifo", "lifo", "minheap", "maxheap"}


def spec(aware: bool) -> dict[str, rc.ArraySpec]:
    leaves = {"observation": rc.ArraySpec((), np.int64), "reward": rc.ArraySpec((2,), np.float32)}
    return {**leaves, "is_last": rc.ArraySpec((), np.bool_)} if aware else leaves


def step(row: int, t: int, aware: bool) -> dict[str, object]:
    """Step ``t`` of ``row``: values that name it, of the spec's exact dtypes and shapes
    (``add`` then takes its unbatched fast path, the one of the issue)."""
    out: dict[str, object] = {
        "observation": np.int64(100 * row + t),
        "reward": np.array([t, -row], np.float32),
    }
    if aware:
        out["is_last"] = np.bool_(t in ENDS)
    return out


class Reference:
    """Steps per row as plain lists (every step ever written, oldest first)."""

    def __init__(self, num_envs: int, aware: bool) -> None:
        self.aware = aware
        self.rows: list[list[dict[str, object]]] = [[] for _ in range(num_envs)]

    def add(self, t: int) -> None:
        for row, steps in enumerate(self.rows):
            steps.append(step(row, t, self.aware))

    def windows(self, n: int) -> list[tuple[int, int]]:
        """Valid ``(row, start)`` windows of ``n`` steps, by start time, then row."""
        out = []
        for row, steps in enumerate(self.rows):
            for start in range(max(0, len(steps) - MAX_LENGTH), len(steps) - n + 1):
                if self.aware and any(steps[s]["is_last"] for s in range(start, start + n - 1)):
                    continue
                out.append((row, start))
        return sorted(out, key=lambda w: (w[1], w[0]))

    def data(self, windows: Iterable[tuple[int, int]], n: int, time_axis: bool) -> dict:
        """Leaves of ``windows`` stacked: ``[B, n, *shape]`` (``[B, *shape]`` without axis)."""
        keys = list(self.rows[0][0])
        out = {}
        for key in keys:
            batch = [[self.rows[r][s + k][key] for k in range(n)] for r, s in windows]
            array = np.array(batch)
            out[key] = array if time_axis else array[:, 0]
        return out


def ids_of(windows: Iterable[tuple[int, int]]) -> np.ndarray:
    return np.array([int(rc.ids.encode(r, s)) for r, s in windows], np.int64)


def make(name: str, aware: bool, sequence_length: int | None, num_envs: int) -> rc.ReplayBuffer:
    return rc.ReplayBuffer(
        spec(aware),
        MAX_LENGTH * num_envs,
        num_envs,
        sampler=SAMPLERS[name](),
        sequence_length=sequence_length,
        max_times_sampled=1 if name in ORDERED else 0,
        rng=7,
    )


def write(buf: rc.ReplayBuffer, ref: Reference, times: range, path: str) -> None:
    """Writes ``times`` to every row by ``add`` (one row), ``add_batch`` or ``extend``."""
    num_envs, aware = len(ref.rows), ref.aware
    if path == "extend":
        block = [[step(r, t, aware) for t in times] for r in range(num_envs)]
        buf.extend({k: np.array([[s[k] for s in row] for row in block]) for k in block[0][0]})
    for t in times:
        if path == "add":
            buf.add(step(0, t, aware))
        elif path == "add_batch":
            rows = [step(r, t, aware) for r in range(num_envs)]
            buf.add_batch({k: np.array([s[k] for s in rows]) for k in rows[0]})
        ref.add(t)


def fill(
    tmp_path: Path,
    name: str,
    aware: bool,
    sequence_length: int | None,
    num_envs: int,
    path: str,
    restored: bool,
) -> tuple[rc.ReplayBuffer, Reference]:
    """A buffer and its reference after FIRST, a save and load (``restored``), then SECOND."""
    buf, ref = make(name, aware, sequence_length, num_envs), Reference(num_envs, aware)
    write(buf, ref, FIRST, path)
    if restored:
        buf.save(tmp_path / "ck")
        buf = rc.ReplayBuffer.load(tmp_path / "ck")
        assert type(buf.reader.sampler) is type(SAMPLERS[name]())
    write(buf, ref, SECOND, path)
    return buf, ref


def check_sampling(
    buf: rc.ReplayBuffer,
    ref: Reference,
    name: str,
    sequence_length: int | None,
    num_steps: int | None,
) -> None:
    """Every sample of ``buf`` is what ``ref`` says the sampler ``name`` returns."""
    n = num_steps or sequence_length or 1
    time_axis = num_steps is not None or n > 1
    windows = ref.windows(n)
    size = len(windows)
    assert size >= 5  # the check below can fail: several windows, some excluded
    priorities = np.ones(size)
    if name in FIXED_LENGTH:  # distinct priorities, not in time order
        priorities = np.random.default_rng(1).permutation(size) + 1.0
        assert buf.update_priorities(ids_of(windows), priorities) == 0
    if name in ORDERED:
        order = {
            "fifo": windows,
            "lifo": windows[::-1],
            "minheap": [windows[k] for k in np.argsort(priorities)],
            "maxheap": [windows[k] for k in np.argsort(-priorities)],
        }[name]
        sample = buf.sample(size, num_steps)  # each window once (max_times_sampled=1)
        np.testing.assert_array_equal(sample.ids, ids_of(order))
        for key, expected in ref.data(order, n, time_axis).items():
            np.testing.assert_array_equal(sample.data[key], expected, err_msg=key)
        np.testing.assert_array_equal(sample.probabilities, 1.0)
        with pytest.raises(NotEnoughDataError, match=r"no (valid )?window of num_steps="):
            buf.sample(1, num_steps)
        return
    values = (priorities + EPSILON) ** ALPHA if name == "prioritized" else priorities
    expected = values / values.sum()
    position = {int(i): k for k, i in enumerate(ids_of(windows))}
    sample = buf.sample(64, num_steps)
    drawn = [position[int(i)] for i in sample.ids]  # KeyError: an invalid window
    for key, leaf in ref.data([windows[k] for k in drawn], n, time_axis).items():
        np.testing.assert_array_equal(sample.data[key], leaf, err_msg=key)
    np.testing.assert_allclose(sample.probabilities, expected[drawn], rtol=1e-9)
    assert sample.table_size == size
    if name == "prioritized":
        weights = (values[drawn] / values.min()) ** -BETA  # (N P)^-beta / (N P_min)^-beta
        np.testing.assert_allclose(sample.weights, weights, rtol=1e-9)

    def counts() -> np.ndarray:
        drawn = [position[int(i)] for i in buf.sample(3000, num_steps).ids]
        return np.bincount(drawn, minlength=size)

    assert_fits(counts, expected)


@pytest.mark.parametrize("restored", [False, True], ids=["fresh", "restored"])
@pytest.mark.parametrize("explicit", [False, True], ids=["default_steps", "explicit_steps"])
@pytest.mark.parametrize("sequence_length", [None, 1, 2], ids=["seq_none", "seq1", "seq2"])
@pytest.mark.parametrize("aware", [True, False], ids=["is_last", "no_is_last"])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_samples_exactly_or_refuses_at_construction(
    tmp_path, name, aware, sequence_length, explicit, restored
):
    if name in FIXED_LENGTH and sequence_length is None:
        with pytest.raises(InvalidArgumentError, match=r"construct the buffer with sequence_le"):
            make(name, aware, sequence_length, 1)
        return
    buf, ref = fill(tmp_path, name, aware, sequence_length, 1, "add", restored)
    num_steps = (sequence_length or 2) if explicit else None
    check_sampling(buf, ref, name, sequence_length, num_steps)


@pytest.mark.parametrize("restored", [False, True], ids=["fresh", "restored"])
@pytest.mark.parametrize("path", ["add_batch", "extend"])
@pytest.mark.parametrize("aware", [True, False], ids=["is_last", "no_is_last"])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_samples_exactly_after_batched_writes(tmp_path, name, aware, path, restored):
    buf, ref = fill(tmp_path, name, aware, 2, 2, path, restored)
    check_sampling(buf, ref, name, 2, None)


def test_prioritized_sampling_of_single_steps_without_is_last():
    """The issue's scenario: ``add`` to a one-row buffer without is_last, then sample."""
    buf = rc.ReplayBuffer(
        spec(False),
        64,
        1,
        sampler=rc.Prioritized(priority_exponent=0.6),
        sequence_length=1,
        rng=0,
    )
    for t in range(40):
        buf.add(step(0, t, False))
    sample = buf.sample(8)
    assert sample.table_size == 40 and not buf.reader.sampler.episode_aware
    np.testing.assert_array_equal(sample.data["observation"], sample.ids)  # row 0: id == t
    np.testing.assert_allclose(sample.probabilities, 1 / 40)


@pytest.mark.parametrize("stored", [-1, 0, 1])
def test_a_checkpointed_episode_flag_never_overrides_the_tables(stored):
    """Older checkpoints saved ``episode_aware=1`` for buffers without is_last (their ``add``
    said so): the table's spec decides, whatever the state holds."""
    for aware in (False, True):
        buf, ref = make("prioritized", aware, 2, 1), Reference(1, aware)
        write(buf, ref, range(12), "add")
        state = {**buf.reader.sampler.state_dict(), "episode_aware": stored}
        buf.reader.sampler.load_state_dict(state)
        assert buf.reader.sampler.episode_aware is aware
        windows = ref.windows(2)
        sample = buf.sample(32)
        assert set(sample.ids.tolist()) <= set(ids_of(windows).tolist())
        assert sample.table_size == len(windows)
