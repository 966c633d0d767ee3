"""Sampling frequencies through the API (chi-square) and the reported probabilities."""

from __future__ import annotations

import numpy as np
import pytest

import recollect.reverb as reverb
from chi_square import assert_fits


def _filled(selector, priorities: list[float]) -> tuple[reverb.Server, reverb.Client]:
    table = reverb.Table(
        "t", selector, reverb.selectors.Fifo(), 100, reverb.rate_limiters.MinSize(1)
    )
    server = reverb.Server([table])
    client = server.localhost_client()
    with client.writer(1) as writer:
        for i, p in enumerate(priorities):
            writer.append(np.int64(i))
            writer.create_item("t", 1, p)
    return server, client


def _counts(client: reverb.Client, n: int, cells: int) -> np.ndarray:
    _, data = client.sample_batch("t", n)
    return np.bincount(data[0][:, 0], minlength=cells)


def test_uniform_frequencies() -> None:
    server, client = _filled(reverb.selectors.Uniform(), [1.0, 5.0, 0.0, 2.0])
    with server:
        assert_fits(lambda: _counts(client, 10_000, 4))
        info = next(client.sample("t", 1))[0].info
        assert info.probability == pytest.approx(0.25) and info.table_size == 4


@pytest.mark.parametrize("exponent", [1.0, 0.5, 0.0])
def test_prioritized_frequencies(exponent: float) -> None:
    prios = np.array([1.0, 5.0, 0.5, 2.0])
    server, client = _filled(reverb.selectors.Prioritized(exponent), prios.tolist())
    expected = prios**exponent / (prios**exponent).sum()
    with server:
        assert_fits(lambda: _counts(client, 10_000, 4), expected)
        for s in client.sample("t", 20, emit_timesteps=False):
            assert s.info.probability == pytest.approx(expected[int(s.data[0][0])])


def test_priority_updates_change_frequencies() -> None:
    server, client = _filled(reverb.selectors.Prioritized(1.0), [1.0, 1.0, 1.0])
    with server:
        info, data = client.sample_batch("t", 50)
        keys = {int(v): int(k) for k, v in zip(info.key, data[0][:, 0], strict=True)}
        client.mutate_priorities("t", updates={keys[0]: 8.0, keys[1]: 0.0})
        assert _counts(client, 2_000, 3)[1] == 0  # priority 0: never sampled
        assert_fits(lambda: _counts(client, 10_000, 3)[[0, 2]], np.array([8.0, 1.0]) / 9.0)
        client.update_priorities("t", np.array([keys[1]], np.uint64), np.array([1.0]))
        assert_fits(lambda: _counts(client, 10_000, 3), np.array([8.0, 1.0, 1.0]) / 10.0)


def test_uniform_remover_keeps_max_size() -> None:
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Uniform(),
        5,
        reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        with client.writer(1) as writer:
            for i in range(50):
                writer.append(np.int64(i))
                writer.create_item("t", 1, 1.0)
        assert table.info.current_size == 5
        _, data = client.sample_batch("t", 200)
        assert len(np.unique(data[0])) <= 5
