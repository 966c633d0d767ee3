"""Checks of scalar arguments: the one place an "int >= 1" (or other bound) is checked.

Two kinds of bad argument, one error type each: a wrong type (a float, a bool or a
string where an int is asked for; an option the callee does not take) raises
:class:`~recollect.errors.InvalidArgumentTypeError`, a value out of range raises
:class:`~recollect.errors.InvalidArgumentError`. Messages name the argument, what is
expected and what was received: "`batch_size` must be an int >= 1; got batch_size=0."

Errors of other domains (a config file, a checkpoint's manifest) keep their own error
type and use the predicate :func:`is_int`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np

from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["check_int", "is_int", "is_number", "no_options", "positive_int"]


def is_int(value: Any, minimum: int | None = None) -> TypeGuard[int | np.integer]:
    """True when ``value`` is an int (Python or numpy; bools excluded), ``>= minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return False
    return minimum is None or bool(value >= minimum)


def is_number(value: Any) -> bool:
    """True when ``value`` is a real number (int or float, Python or numpy; bools excluded)."""
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    meaning: str | None = None,
    show_name: bool = True,
    owner: str | None = None,
) -> int:
    """``value`` as a Python int within ``[minimum, maximum]`` (either bound optional).

    Args:
        name: the argument's name, shown in backticks.
        value: what the caller passed.
        minimum: smallest allowed value (None: no lower bound).
        maximum: largest allowed value (None: no upper bound).
        meaning: what the number counts, shown after the bound ("batches kept ready").
        show_name: the received value is shown as ``name=value`` (False: ``value``).
        owner: what takes the argument, shown first ("zstd `level` must be ...").

    Raises:
        InvalidArgumentTypeError: not an int (bools excluded).
        InvalidArgumentError: out of range.
    """
    if type(value) is int and (minimum is None or value >= minimum):  # the common case, before
        if maximum is None or value <= maximum:  # any message is formatted (~3 us a call)
            return value
    if minimum is not None and maximum is not None:
        expected = f"an int in [{minimum}, {maximum}]"
    elif minimum is not None:
        expected = f"an int >= {minimum}"
    elif maximum is not None:
        expected = f"an int <= {maximum}"
    else:
        expected = "an int"
    if meaning:
        expected = f"{expected} ({meaning})"
    got = f"{name}={value!r}" if show_name else repr(value)
    what = f"{owner} `{name}`" if owner else f"`{name}`"
    if not is_int(value):
        raise InvalidArgumentTypeError(
            f"{what} must be {expected}; got {got} ({type(value).__name__})."
        )
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidArgumentError(f"{what} must be {expected}; got {got}.")
    return int(value)


def positive_int(name: str, value: Any, meaning: str | None = None) -> int:
    """``value`` as an int >= 1 (see :func:`check_int`).

    Raises:
        InvalidArgumentTypeError: not an int (bools excluded).
        InvalidArgumentError: < 1.
    """
    return check_int(name, value, minimum=1, meaning=meaning)


def no_options(what: str, options: Mapping[str, Any], takes: str | None = None) -> None:
    """Raises when ``options`` (a callee's ``**kwargs`` left after the ones it takes) is
    not empty.

    Args:
        what: the callee, first in the message ("Fifo sampling").
        options: the options left over.
        takes: the options the callee does take, named in the message (None: it takes none).

    Raises:
        InvalidArgumentTypeError: "``what`` takes no options; got [names]." (with ``takes``:
            "``what`` takes only ``takes``; got [names].")
    """
    if options:
        allowed = "no options" if takes is None else f"only {takes}"
        raise InvalidArgumentTypeError(f"{what} takes {allowed}; got {sorted(options)}.")


def reverb_positive_int(name: str, value: Any, *, or_minus_one: bool = False) -> int:
    """``value`` as an int >= 1 (or -1, Reverb's "auto", with ``or_minus_one``), refused
    with Reverb's own message ("NAME (VALUE) must be a positive integer"), which Reverb
    users' code and tests match; for :mod:`recollect.reverb`.

    Raises:
        InvalidArgumentError: not an int, or < 1 (and not an allowed -1).
    """
    if is_int(value) and (value >= 1 or (or_minus_one and value == -1)):
        return int(value)
    suffix = " or -1" if or_minus_one else ""
    raise InvalidArgumentError(f"{name} ({value}) must be a positive integer{suffix}")
