"""The second-draw chi-square check of the service's sampling tests (tests/chi_square.py)."""

from __future__ import annotations

import numpy as np
import pytest

from chi_square import assert_fits


def test_a_biased_sampler_fails_both_draws() -> None:
    rng = np.random.default_rng(0)
    calls = []

    def draw() -> np.ndarray:
        calls.append(1)
        return np.bincount(rng.choice(10, 5000, p=[0.2] + [0.8 / 9] * 9), minlength=10)

    with pytest.raises(AssertionError, match="two draws"):
        assert_fits(draw)
    assert len(calls) == 2


def test_one_unlucky_draw_is_drawn_again() -> None:
    draws = iter([np.array([900, 100, 100, 100]), np.array([250, 240, 260, 250])])
    assert_fits(lambda: next(draws))
    with pytest.raises(StopIteration):
        next(draws)  # both were drawn


def test_expected_probabilities_are_scaled_to_the_counts() -> None:
    assert_fits(lambda: np.array([500, 300, 200]), np.array([0.5, 0.3, 0.2]))
    with pytest.raises(AssertionError):
        assert_fits(lambda: np.array([500, 300, 200]), np.array([0.2, 0.3, 0.5]))
