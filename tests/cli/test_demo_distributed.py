"""``recollect demo --distributed``: the Ape-X pieces without Ray, and a slow end-to-end run."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import recollect as rc
from recollect.cli import main
from recollect.errors import InvalidArgumentError

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from recollect.cli.demo_distributed import _plot_ratio, table_summary
from recollect.examples import apex, dqn


def test_actor_epsilons_follow_the_apex_formula():
    eps = apex.actor_epsilons(4)
    expected = [0.4 ** (1 + 7 * i / 3) for i in range(4)]
    np.testing.assert_allclose(eps, expected)
    assert apex.actor_epsilons(1).tolist() == [0.4]


def test_apex_table_is_prioritized_rate_limited_and_fits_every_actor_row():
    cfg = apex.ApexConfig(num_actors=3, envs_per_actor=2, capacity=2_000, min_size_to_sample=100)
    env = dqn.make_env(cfg.env_id, 1)
    table = apex.make_table(cfg, env)
    env.close()
    info = table.info()
    assert table.num_envs == 6 and table.capacity == 1_998  # a multiple of the rows
    assert info.sampler["type"] == "Prioritized"
    assert info.rate_limiter["type"] == "SampleToInsertRatio"
    assert info.rate_limiter["samples_per_insert"] == cfg.samples_per_insert


def _served_steps(num_steps: int = 40) -> rc.service.Server:
    spec = {"x": rc.ArraySpec((2,), np.float32), "is_last": rc.ArraySpec((), np.bool_)}
    buf = rc.ReplayBuffer(spec, 64, 2, sampler=rc.Prioritized(), sequence_length=2, rng=0)
    server = rc.service.Server({"t": buf})
    with server.client().writer("t", 2, chunk_length=5) as writer:
        for t in range(num_steps // 2):
            writer.add_batch({"x": np.full((2, 2), t, np.float32), "is_last": np.zeros(2, bool)})
    return server


def test_sample_prefetcher_yields_batches_and_stops_on_close():
    server = _served_steps()
    client = server.client()
    prefetch = apex.SamplePrefetcher(client, "t", 4, 2, poll_s=0.05)
    samples = [next(prefetch) for _ in range(3)]
    prefetch.close()
    for s in samples:
        assert s.data["x"].shape == (4, 2, 2) and s.weights.shape == (4,)
        client.update_priorities("t", s.ids, np.full(4, 2.0), wait=True)
    client.close()
    server.close()


def test_sample_prefetcher_raises_the_sampling_error_in_the_consumer():
    server = _served_steps()
    prefetch = apex.SamplePrefetcher(server.client(), "nope", 4, 2, poll_s=0.05)
    with pytest.raises(InvalidArgumentError, match="no table named 'nope'"):
        next(prefetch)
    prefetch.close()
    server.close()


def test_ratio_plot_and_table_summary(tmp_path):
    rates = [(0.0, 0, 0), (1.0, 1_000, 8_000), (2.0, 2_500, 30_000)]
    _plot_ratio(tmp_path / "ratio.png", rates, 16.0)
    assert (tmp_path / "ratio.png").read_bytes()[:4] == b"\x89PNG"
    server = _served_steps()
    summary = table_summary(server.client().info("t"))
    assert summary["inserts"] == 40 and summary["steps_stored"] == 40
    assert summary["mean_return"] is None
    server.close()


def test_demo_help_documents_the_distributed_options():
    result = CliRunner().invoke(main, ["demo", "--help"])
    assert result.exit_code == 0
    assert "--distributed" in result.output and "--actors" in result.output


@pytest.mark.slow
def test_distributed_demo_solves_cartpole(tmp_path):
    from loopback import run_in_loopback

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "recollect", "demo", "--distributed", "--actors", "4",
            "--quiet", "--out", str(out)]  # fmt: skip
    result = run_in_loopback(argv, timeout_s=1_200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"]["mean_return"] >= 475
    assert summary["buffer"]["samples_per_insert"] > 0
    for png in ("learning_curve.png", "samples_per_insert.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
