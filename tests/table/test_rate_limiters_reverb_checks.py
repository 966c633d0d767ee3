"""SampleToInsertRatio's argument checks, one for one with Reverb's (issue 26, item 4)."""

from __future__ import annotations

import warnings

import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError


def test_error_buffer_above_the_start_balance_is_refused():
    # Reverb: min_diff > samples_per_insert * min_size_to_sample raises ValueError
    with pytest.raises(
        ValueError, match=r"lies above samples_per_insert \* min_size_to_sample = 10"
    ):
        rc.SampleToInsertRatio(1, 10, (11, 15))
    with pytest.raises(InvalidArgumentError, match=r"\[41, 60\] .* = 40"):
        rc.SampleToInsertRatio(2.0, 20, (41.0, 60.0))


def test_error_buffer_below_the_start_balance_warns_as_reverb_logs():
    with pytest.warns(RuntimeWarning, match=r"lies below samples_per_insert \* min_size_to_sample"):
        limiter = rc.SampleToInsertRatio(2.0, 10, (-5.0, 15.0))
    assert (limiter.min_diff, limiter.max_diff) == (-5.0, 15.0)


def test_bounds_touching_the_start_balance_are_accepted_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc.SampleToInsertRatio(1, 10, (10, 15))  # min_diff == offset: allowed
        rc.SampleToInsertRatio(1, 10, (5, 10))  # max_diff == offset: no warning
        rc.SampleToInsertRatio(4.0, 100, 8.0)  # a number: centred on the offset


def test_reverb_width_and_size_checks_still_hold():
    with pytest.raises(ValueError, match=r"less than 2 \* max\(1, samples_per_insert\)"):
        rc.SampleToInsertRatio(3.0, 10, 2.9)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        rc.SampleToInsertRatio(1.0, 0, 5.0)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        rc.MinSize(0)
