"""Chi-square checks of samples whose draws are not reproducible (a served table's shards
answer on threads, so a fixed ``rng`` still interleaves differently from run to run)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats

P_MIN = 1e-4  # one draw: a false alarm once in 10,000 runs


def assert_fits(draw: Callable[[], np.ndarray], expected: np.ndarray | None = None) -> None:
    """Asserts that ``draw()``'s counts fit ``expected`` (the probability of each cell;
    None: uniform) by Pearson's chi-square test.

    A draw with p < ``P_MIN`` is drawn again, and the check fails only when both are:
    a false alarm then comes once in 10^8 runs, where one draw would give one in 10^4
    (tests like these run on every CI session), while a biased sampler, whose p is ~0
    on every draw, still fails.
    """
    pvalues = []
    for _ in range(2):
        counts = np.asarray(draw())
        f_exp = None if expected is None else counts.sum() * np.asarray(expected)
        pvalues.append(stats.chisquare(counts, f_exp).pvalue)
        if pvalues[-1] > P_MIN:
            return
    raise AssertionError(f"counts do not fit: chi-square p = {pvalues} over two draws")
