"""ThreadChooser: picks one thread or a split per size class by measured throughput.

Oracle: a simulated machine whose per-mode time per call is set by the test;
the chooser must end up on the faster mode, quickly after the speeds change,
and spend few calls on the slower one.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recollect.storage.gather import ThreadChooser

NBYTES = 9 << 20


def _run(chooser: ThreadChooser, seconds: dict[bool, float], calls: int) -> list[bool]:
    """``calls`` decisions on a machine taking ``seconds[split]`` per call."""
    picks = []
    for _ in range(calls):
        split = chooser.split(NBYTES)
        chooser.record(NBYTES, split, seconds[split])
        picks.append(split)
    return picks


@pytest.mark.parametrize("split_faster", [False, True])
def test_it_settles_on_the_faster_mode_and_rarely_tries_the_other(split_faster):
    chooser = ThreadChooser()
    seconds = {split_faster: 2e-3, not split_faster: 3e-3}
    picks = _run(chooser, seconds, 1000)
    assert picks[-100:].count(split_faster) >= 98
    assert picks[10:].count(not split_faster) <= 1000 // chooser.explore + 2


def test_a_mode_that_measured_badly_while_warming_up_takes_over_within_a_few_calls():
    """Split measured slow at first (a cold worker), then is 1.5x faster: with one try
    every 64 calls alone, three tries (about 190 calls) would pass before it wins."""
    chooser = ThreadChooser()
    _run(chooser, {False: 4e-3, True: 9e-3}, 20)  # warm-up: single looks better
    picks = _run(chooser, {False: 4e-3, True: 2.7e-3}, 200)
    first = picks.index(True)
    assert first < chooser.explore + 1
    assert all(picks[first : first + 10]), "split takes over from its first try on"
    assert picks[first:].count(False) <= len(picks) // chooser.explore + 1  # tries of single


@settings(max_examples=30, deadline=None)
@given(
    single=st.floats(1e-4, 1e-2),
    ratio=st.floats(0.3, 3.0).filter(lambda r: abs(r - 1) > 0.2),
)
def test_the_faster_mode_wins_for_any_speeds(single, ratio):
    chooser = ThreadChooser()
    seconds = {False: single, True: single * ratio}
    picks = _run(chooser, seconds, 300)
    faster = ratio < 1
    assert picks[-60:].count(faster) >= 58


def test_size_classes_are_measured_apart():
    chooser = ThreadChooser()
    small, large = 64 << 10, 16 << 20
    for _ in range(300):
        for nbytes, times in (
            (small, {False: 1e-4, True: 3e-4}),
            (large, {False: 4e-3, True: 2e-3}),
        ):
            split = chooser.split(nbytes)
            chooser.record(nbytes, split, times[split])
    assert not chooser.split(small) or chooser.calls % chooser.explore == 0
    assert chooser.split(large) or chooser.calls % chooser.explore == 0
