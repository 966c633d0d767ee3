"""recollect.arguments: one error type per kind of bad argument, messages that name it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from recollect.arguments import check_int, is_int, is_number, no_options, positive_int
from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError


def test_positive_int_returns_a_python_int():
    assert positive_int("batch_size", 3) == 3
    value = positive_int("batch_size", np.int32(7))
    assert value == 7 and type(value) is int


@pytest.mark.parametrize("value", [0, -1, np.int64(0)])
def test_a_value_out_of_range_is_an_invalid_argument_error(value):
    with pytest.raises(
        InvalidArgumentError,
        match=rf"`batch_size` must be an int >= 1; got batch_size={re.escape(repr(value))}\.",
    ) as info:
        positive_int("batch_size", value)
    assert not isinstance(info.value, TypeError)


@pytest.mark.parametrize("value", [1.0, True, "2", None])
def test_a_wrong_type_is_a_type_error_and_an_invalid_argument_error(value):
    with pytest.raises(
        InvalidArgumentTypeError, match=r"`n_step` must be an int >= 1; got n_step="
    ) as info:
        positive_int("n_step", value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert type(value).__name__ in str(info.value)


def test_check_int_names_bounds_meaning_and_owner():
    assert check_int("level", 3, minimum=0, maximum=9) == 3
    with pytest.raises(
        InvalidArgumentError, match=r"zlib `level` must be an int in \[0, 9\]; got level=10\."
    ):
        check_int("level", 10, minimum=0, maximum=9, owner="zlib")
    with pytest.raises(
        InvalidArgumentError,
        match=r"`prefetch` must be an int >= 1 \(batches kept ready\); got prefetch=0\.",
    ):
        positive_int("prefetch", 0, "batches kept ready")
    with pytest.raises(InvalidArgumentError, match=r"`num_steps` must be an int >= 1; got 0\."):
        check_int("num_steps", 0, minimum=1, show_name=False)
    with pytest.raises(InvalidArgumentError, match=r"`k` must be an int <= 2; got k=3\."):
        check_int("k", 3, maximum=2)


def test_predicates():
    assert is_int(3) and is_int(np.uint8(3)) and is_int(0, minimum=0)
    assert not is_int(True) and not is_int(3.0) and not is_int(-1, minimum=0)
    assert is_number(2) and is_number(0.5) and is_number(np.float32(1))
    assert not is_number(False) and not is_number("1")


def test_no_options():
    no_options("Uniform sampling", {})
    with pytest.raises(
        InvalidArgumentTypeError, match=r"Fifo sampling takes no options; got \['a', 'b'\]\."
    ):
        no_options("Fifo sampling", {"b": 1, "a": 2})
