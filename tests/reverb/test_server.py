"""Server and Table behaviour of recollect.reverb, as Reverb's (its server_test.py is the spec)."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import recollect.reverb as reverb
from recollect.errors import InvalidArgumentError


def _table(name: str = "t", **kw) -> reverb.Table:
    args = dict(
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    args.update(kw)
    return reverb.Table(name, **args)


def test_server_needs_tables_with_distinct_names() -> None:
    with pytest.raises(ValueError, match="At least one table must be provided"):
        reverb.Server([])
    with pytest.raises(ValueError, match="Multiple items in tables have the same name: a"):
        reverb.Server([_table("a"), _table("a")])


def test_table_validates_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="name must be nonempty"):
        _table("")
    with pytest.raises(InvalidArgumentError, match=r"max_size \(0\) must be a positive integer"):
        _table(max_size=0)
    with pytest.raises(InvalidArgumentError, match="extensions are not supported"):
        _table(extensions=[object()])


def test_localhost_client_reaches_the_server_in_process() -> None:
    with reverb.Server([_table()]) as server:
        client = server.localhost_client()
        assert client.server_address == f"localhost:{server.port}"
        client.insert(np.ones(3, np.float32), {"t": 1.0})
        assert client.server_info()["t"].current_size == 1
        again = pickle.loads(pickle.dumps(client))
        assert again.server_address == client.server_address
        again.insert(np.ones(3, np.float32), {"t": 1.0})
        assert server.localhost_client().server_info()["t"].current_size == 2


def test_stopped_server_is_unreachable() -> None:
    server = reverb.Server([_table()])
    address = f"localhost:{server.port}"
    server.stop()
    with pytest.raises(reverb.errors.DeadlineExceededError, match="did not complete"):
        reverb.Client(address).server_info(timeout=1)


def test_wait_returns_after_stop_from_another_thread() -> None:
    server = reverb.Server([_table()])
    threading.Timer(0.05, server.stop).start()
    server.wait()


def test_table_info_has_reverbs_fields() -> None:
    table = _table(sampler=reverb.selectors.Prioritized(0.8), max_times_sampled=3)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(3):
            client.insert([i], {"t": 1.0})
        list(client.sample("t", 2))
        info = table.info
        assert (info.name, info.max_size, info.max_times_sampled, info.current_size) == (
            "t",
            10,
            3,
            3,
        )
        assert info.sampler_options.prioritized.priority_exponent == 0.8
        assert info.remover_options.fifo and info.remover_options.is_deterministic
        limiter = info.rate_limiter_info
        assert limiter.min_size_to_sample == 1 and limiter.samples_per_insert == 1.0
        assert limiter.HasField("insert_stats")
        assert limiter.insert_stats.completed == 3 and limiter.sample_stats.completed == 2
        assert info.num_episodes == 3 and info.num_unique_samples >= 1
        assert client.server_info()["t"].current_size == 3


def test_can_sample_and_can_insert_follow_the_limiter() -> None:
    table = reverb.Table.queue("q", 2)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        assert not table.can_sample(1) and table.can_insert(2) and not table.can_insert(3)
        client.insert([1], {"q": 1.0})
        assert table.can_sample(1) and not table.can_sample(2) and table.can_insert(1)
        client.insert([2], {"q": 1.0})
        assert table.can_sample(2) and not table.can_insert(1)


def test_replace_copies_configuration() -> None:
    table = _table(max_times_sampled=2)
    other = table.replace(name="u", max_size=5)
    assert (other.name, other.max_size, other.max_times_sampled) == ("u", 5, 2)
    assert other.sampler == table.sampler and other.info.current_size == 0


def test_rate_limiter_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"min_size_to_sample \(0\) must be a positive integer"):
        reverb.rate_limiters.MinSize(0)
    with pytest.raises(ValueError, match="error_buffer must be >= max"):
        reverb.rate_limiters.SampleToInsertRatio(2.0, 10, 1.0)
    with pytest.raises(ValueError, match="range covered by error_buffer is above"):
        reverb.rate_limiters.SampleToInsertRatio(1.0, 10, (20.0, 40.0))
    with pytest.raises(ValueError, match=r"samples_per_insert \(0\) must be > 0"):
        reverb.rate_limiters.SampleToInsertRatio(0, 10, 5.0)
    with pytest.raises(ValueError, match="priority_exponent must be"):
        reverb.selectors.Prioritized(-1.0)


def test_sample_to_insert_ratio_blocks_the_faster_side() -> None:
    limiter = reverb.rate_limiters.SampleToInsertRatio(2.0, 2, (0.0, 4.0))
    table = _table(rate_limiter=limiter, max_size=100)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        client.insert([0], {"t": 1.0})
        assert not table.can_sample(1)  # below min size
        client.insert([1], {"t": 1.0})
        # error = 2 * 2 - 0 = 4 = max_diff: another insert would exceed it
        assert not table.can_insert(1) and table.can_sample(4) and not table.can_sample(5)
        list(client.sample("t", 2))
        assert table.can_insert(1)
