"""SB3 DQN on CartPole-v1 with the rl-zoo hyperparameters: recollect's buffers learn as SB3's.

Runs ``benchmarks/sb3_cartpole.py``'s training (50k env steps per run, about
1.5 min each on a 2-core machine); slow, so only in CI or with ``--run-slow``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sb3_cartpole import ZOO_STEPS, run, summary

pytestmark = pytest.mark.slow
SEEDS = (0, 1, 2)


def summaries(variant: str) -> list[dict[str, float]]:
    return [summary(run(variant, seed, ZOO_STEPS, 5_000, 10)) for seed in SEEDS]


def test_dqn_with_recollect_buffer_evaluates_as_with_sb3_buffer_on_cartpole():
    ours, theirs = summaries("recollect"), summaries("sb3")
    # DQN on CartPole oscillates (the final evaluation of SB3's own buffer ranged from
    # 19 to 500 over 3 seeds), so compare what is stable: every seed solves it (a greedy
    # evaluation >= 475) with both buffers, and the mean of all 30 evaluations (10 per
    # seed) agrees within 60 (measured: SB3 248, recollect 239).
    assert all(s["best"] >= 475 for s in theirs), theirs
    assert all(s["best"] >= 475 for s in ours), ours
    means = [np.mean([s["curve_mean"] for s in x]) for x in (ours, theirs)]
    assert means[0] >= means[1] - 60, (ours, theirs)


def test_prioritized_dqn_solves_cartpole():
    per = summaries("recollect-per")
    assert all(s["best"] >= 475 for s in per), per
