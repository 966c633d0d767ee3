"""Table semantics: max_times_sampled removal and heap selectors against tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import recollect as rc
from recollect import ids as id_layout
from recollect.errors import InvalidArgumentError
from reference import ReferenceTable

SPEC = {"x": rc.ArraySpec((), np.int64), "is_last": rc.ArraySpec((), np.bool_)}
NUM_ENVS, MAX_LENGTH = 3, 6
KINDS = ("fifo", "lifo", "minheap", "maxheap", "uniform", "prioritized")


def make_sampler(kind: str) -> rc.Sampler:
    return {
        "fifo": rc.Fifo,
        "lifo": rc.Lifo,
        "minheap": rc.MinHeap,
        "maxheap": rc.MaxHeap,
        "uniform": rc.Uniform,
        "prioritized": rc.Prioritized,
    }[kind]()


class TableMachine(RuleBasedStateMachine):
    """Random writes, draws, priority updates, clears and state round trips."""

    @initialize(
        kind=st.sampled_from(KINDS),
        num_steps=st.integers(1, 3),
        max_times=st.integers(0, 3),
    )
    def setup(self, kind: str, num_steps: int, max_times: int) -> None:
        self.kind, self.n = kind, num_steps
        self.buf = rc.ReplayBuffer(
            SPEC,
            NUM_ENVS * MAX_LENGTH,
            NUM_ENVS,
            rng=0,
            sampler=make_sampler(kind),
            sequence_length=num_steps,
            max_times_sampled=max_times,
        )
        self.ref = ReferenceTable(NUM_ENVS, MAX_LENGTH, num_steps, max_times)

    def _write(self, rows: list[int], ends: list[bool]) -> None:
        x = np.array([r * 10_000 + self.ref.t[r] for r in rows], np.int64)
        step = {"x": x, "is_last": np.array(ends, bool)}
        if len(rows) == NUM_ENVS and rows == list(range(NUM_ENVS)):
            self.buf.add_batch(step)
        else:
            self.buf.add_batch(step, rows=rows)
        for r, end in zip(rows, ends, strict=True):
            self.ref.add(r, end)

    @rule(ends=st.lists(st.booleans(), min_size=NUM_ENVS, max_size=NUM_ENVS))
    def add_all(self, ends: list[bool]) -> None:
        self._write(list(range(NUM_ENVS)), ends)

    @rule(rows=st.sets(st.integers(0, NUM_ENVS - 1), min_size=1), end=st.booleans())
    def add_rows(self, rows: set[int], end: bool) -> None:
        self._write(sorted(rows), [end] * len(rows))

    @rule(batch=st.integers(1, 5))
    def sample(self, batch: int) -> None:
        valid = self.ref.valid()
        if not valid or (self.ref.max_times and self.ref.allowance() < batch):
            with pytest.raises(rc.errors.NotEnoughDataError):
                self.buf.sample(batch)
            return
        s = self.buf.sample(batch)
        _, rows, times = id_layout.decode(s.ids)
        got = list(zip(rows.tolist(), times.tolist(), strict=True))
        assert s.table_size == len(valid)
        x = s.data["x"].reshape(batch, -1)
        expected = (rows * 10_000 + times)[:, None] + np.arange(x.shape[1])
        assert (x == expected).all()
        if self.kind == "uniform" and not self.ref.max_times:
            assert np.allclose(s.probabilities, 1.0 / len(valid))
        expected_counts = []
        counts = dict(self.ref.counts)
        for w in got:
            counts[w] = counts.get(w, 0) + 1
            expected_counts.append(counts[w])
        if s.times_sampled is not None:
            assert s.times_sampled.tolist() == expected_counts
        # Reverb: each item of a batch is one selection; a window reaching max_times is
        # removed before the next one; deterministic selectors take their first window
        for w in got:
            if self.kind in ("fifo", "lifo", "minheap", "maxheap"):
                assert w == self.ref.ordered(self.kind)[0], (got, self.ref.ordered(self.kind))
            self.ref.take(w)

    @rule(data=st.data())
    def update_priorities(self, data: st.DataObject) -> None:
        if self.kind not in ("minheap", "maxheap", "prioritized"):
            return
        valid = self.ref.valid()
        if not valid:
            return
        chosen = data.draw(st.lists(st.sampled_from(valid), min_size=1, max_size=4, unique=True))
        prios = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]),
                                   min_size=len(chosen), max_size=len(chosen)))  # fmt: skip
        rows = np.array([w[0] for w in chosen])
        times = np.array([w[1] for w in chosen])
        assert self.buf.update_priorities(id_layout.encode(rows, times), prios) == 0
        for w, p in zip(chosen, prios, strict=True):
            self.ref.set_priority(w, p)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """Deletes some valid windows and some stale or unknown ids (skipped, counted)."""
        stored = [
            (r, s)
            for r, t in enumerate(self.ref.t)
            for s in range(max(0, t - MAX_LENGTH - 2), t + 2)
        ]
        chosen = data.draw(st.lists(st.sampled_from(stored), max_size=4, unique=True))
        rows = np.array([w[0] for w in chosen], np.int64)
        times = np.array([w[1] for w in chosen], np.int64)
        deletes = self.buf.info().deletes
        expected = sum(not self.ref.delete(w) for w in chosen)
        assert self.buf.delete(id_layout.encode(rows, times)) == expected
        assert self.buf.info().deletes == deletes + len(chosen) - expected

    @rule()
    def clear(self) -> None:
        self.buf.clear()
        self.ref.clear()

    @rule()
    def round_trip(self) -> None:
        """Continue with a buffer restored from this one's config and state."""
        restored = rc.ReplayBuffer.from_config(self.buf.config(), rng=0)
        restored.load_state_dict(self.buf.state_dict())
        restored.table.rng = self.buf.reader.rng
        self.buf = restored

    @invariant()
    def size_matches(self) -> None:
        if hasattr(self, "buf"):
            assert self.buf.info().size == len(self.ref.valid())
            assert self.buf.table.index.count(self.n, True) == len(self.ref.valid())


TestTableMachine = TableMachine.TestCase
TestTableMachine.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_fifo_queue_delivers_each_window_once_in_order():
    buf = rc.ReplayBuffer(
        SPEC, 20, 2, sampler=rc.Fifo(), max_times_sampled=1, rate_limiter=rc.Queue(10)
    )
    for i in range(4):
        buf.add_batch({"x": np.array([i, 100 + i]), "is_last": np.zeros(2, bool)})
    assert buf.sample(3).data["x"].tolist() == [0, 100, 1]
    assert buf.sample(5).data["x"].tolist() == [101, 2, 102, 3, 103]
    assert buf.info().deletes == 8 and buf.info().size == 0


def test_removed_windows_are_never_drawn_and_probabilities_stay_exact():
    buf = rc.ReplayBuffer(SPEC, 100, 1, rng=0, max_times_sampled=1)
    for i in range(10):
        buf.add({"x": np.int64(i), "is_last": np.bool_(False)})
    seen = set()
    for remaining in range(10, 0, -1):
        s = buf.sample(1)
        assert s.probabilities[0] == pytest.approx(1.0 / remaining)
        assert int(s.data["x"][0]) not in seen
        seen.add(int(s.data["x"][0]))
    assert seen == set(range(10))


def test_heaps_need_sequence_length_and_refuse_bad_arguments():
    with pytest.raises(InvalidArgumentError, match="construct the buffer with sequence_length"):
        rc.ReplayBuffer(SPEC, 10, sampler=rc.MinHeap())
    with pytest.raises(InvalidArgumentError, match=r"`initial_priority` must be a finite float"):
        rc.MaxHeap(initial_priority=-1.0)
    buf = rc.ReplayBuffer(SPEC, 10, sampler=rc.MaxHeap(), sequence_length=1)
    buf.add({"x": np.int64(1), "is_last": np.bool_(False)})
    with pytest.raises(InvalidArgumentError, match=r"MaxHeap sampling takes no options"):
        buf.sample(1, importance_sampling_exponent=0.5)


def test_heap_config_round_trips():
    buf = rc.ReplayBuffer(SPEC, 10, sampler=rc.MinHeap(2.5), sequence_length=2)
    again = rc.ReplayBuffer.from_config(buf.config())
    assert isinstance(again.reader.sampler, rc.MinHeap)
    assert again.reader.sampler.get_config() == {"initial_priority": 2.5}


def test_readme_rate_limiter_block_runs_after_the_quick_start():
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "rate-limiters.md"
    body = page.read_text(encoding="utf-8")  # blocks[0]: the page's hidden set-up
    blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    (block,) = [b for b in blocks if "rc.Queue(100)" in b]
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["first"].data["observation"].shape == (4, 4)
    assert namespace["queue"].info().deletes == 4
    assert namespace["info"].samples == 32 and namespace["info"].inserts == 16
