"""Checks of what callers hand a prioritized sampler: exponents, priority updates,
priorities whose ``(p + epsilon) ** alpha`` would overflow, and checkpoint values.

Each raises :class:`~recollect.errors.InvalidArgumentError` with the value, the
rule and what to do, before anything is changed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.samplers.sum_tree import SumTree

__all__ = ["check_exponent", "check_state_values", "check_sum_finite", "check_update"]


_INF_BITS = np.uint64(0x7FF0000000000000)
_ZERO_BITS = np.uint64(0)


def check_exponent(name: str, value: Any) -> float:
    """``value`` as a float, refused unless finite and >= 0 (``alpha``, ``beta``, ``epsilon``)."""
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"`{name}` must be a finite float >= 0; got {name}={value!r}.")
    return value


def check_update(ids: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """The checks :meth:`Prioritized.update_priorities` makes of its arguments alone (1-D,
    one length, integer ids, finite priorities >= 0), with its messages; a served table's
    client makes them when it holds an update back, so a bad call fails where it was made.

    Returns:
        ``(ids, priorities, largest)``: int64 and float64 ``[K]`` and the largest priority.

    Raises:
        InvalidArgumentError: as ``Prioritized.update_priorities``.
    """
    ids = np.asarray(ids)
    priorities = np.asarray(priorities, dtype=np.float64)
    if ids.size == 0 and ids.ndim == 1 and priorities.shape == ids.shape:
        return np.zeros(0, np.int64), priorities, 0.0
    if ids.ndim != 1 or ids.shape != priorities.shape:
        raise InvalidArgumentError(
            f"update_priorities needs 1-D ids and priorities of the same shape; got ids "
            f"shape {ids.shape}, priorities shape {priorities.shape}."
        )
    if ids.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"update_priorities needs integer ids (Sample.ids); got dtype {ids.dtype}."
        )
    # one pass: a finite float >= +0.0 orders as its bits, below inf's; a negative one
    # (-0.0 too: the slow path takes it), inf or NaN has larger bits
    top = np.maximum.reduce(priorities.view(np.uint64)) if len(priorities) else _ZERO_BITS
    if top < _INF_BITS:  # fast path: no nan, inf, < 0
        return ids.astype(np.int64, copy=False), priorities, float(top.view(np.float64))
    largest = float(priorities.max())
    bad = ~np.isfinite(priorities) | (priorities < 0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InvalidArgumentError(
            f"priorities must be finite and >= 0; got {float(priorities[first])} at position "
            f"{first} ({int(bad.sum())} bad value(s)). Nothing was updated; pass e.g. "
            "np.abs(td_error) and check the loss for NaN."
        )
    return ids.astype(np.int64, copy=False), priorities, largest


def check_sum_finite(
    tree: SumTree,
    keys: np.ndarray,
    priorities: np.ndarray,
    largest: float,
    epsilon: float,
    alpha: float,
) -> None:
    """Refuses priorities (of leaves ``keys``) whose ``(p + epsilon) ** alpha`` or whose sum
    with the rest of ``tree`` overflows.

    Python float arithmetic on the largest priority decides it without a numpy
    overflow warning: the new sum is at most ``total + len(keys) * top``.
    """
    try:
        top = (largest + epsilon) ** alpha
    except OverflowError:
        top = math.inf
    if tree.total + len(keys) * top < math.inf:
        return
    with np.errstate(over="ignore"):  # the exact check, only near the float64 range
        values = np.power(np.add(priorities, epsilon), alpha)
        total = tree.total - float(tree[keys].sum()) + float(values.sum())
    bad = ~np.isfinite(values)
    if not bad.any() and np.isfinite(total):
        return
    first = int(np.flatnonzero(bad)[0]) if bad.any() else int(np.argmax(priorities))
    raise InvalidArgumentError(
        f"priority {float(priorities[first])} overflows: (p + epsilon) ** alpha with alpha="
        f"{alpha} (or the sum of all priorities) is not a finite float64. Nothing was "
        "updated; clip or rescale the priorities (e.g. np.minimum(p, 1e6))."
    )


def check_state_values(state: dict[str, Any], values: np.ndarray) -> None:
    """Refuses a sampler state with NaN, inf or negative priorities or exponents."""
    scalars = {k: float(state[k]) for k in ("max_priority", "priority_exponent", "epsilon")}
    raw = np.asarray(state.get("priority", np.zeros(0)), dtype=np.float64)
    for name, array in (("values", values), ("priority", raw), *scalars.items()):
        array = np.asarray(array)
        if not np.isfinite(array).all() or (array < 0).any():
            raise InvalidArgumentError(
                f"prioritized sampler state field {name!r} holds NaN, inf or negative values; "
                "the state is damaged. Restore it from a backup or save the buffer again."
            )
