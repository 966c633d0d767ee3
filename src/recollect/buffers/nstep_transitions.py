"""n-step transitions for :class:`~recollect.TransitionBuffer` (``sample(..., n_step=n)``).

A sampled transition at step time ``s`` of env row ``r`` is extended forward
over the following transitions ``s + 1, s + 2, ...`` of the same row. It stops
after ``k <= n`` transitions, at the first of:

* ``n`` transitions summed;
* a transition that ends its episode: ``terminated`` or ``truncated``, or a
  broken observation chain (the next ``add`` of that env did not start from
  this transition's ``next_observation``, e.g. a reset without flags);
* the newest stored transition (later rewards are not known yet; the target
  then bootstraps after ``k < n`` steps, which ``discount = gamma^k`` says).

The result: ``reward = sum_{j<k} gamma^j r_{s+j}``, ``next_observation`` and
``terminated``/``truncated`` of transition ``s + k - 1``, ``discount = gamma^k``.
Sampling itself is unchanged (the same transitions, ids and probabilities as
1-step sampling), so prioritized sampling keys stay those of the start
transition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from recollect.nstep import discounted_sum

if TYPE_CHECKING:
    from recollect.buffers.replay_buffer import ReplayBuffer

__all__ = ["ObservationChains", "n_step_fields"]


class ObservationChains(Protocol):
    """What n-step sampling reads of a :class:`~recollect.TransitionBuffer`."""

    @property
    def replay_buffer(self) -> ReplayBuffer: ...

    def chain_breaks(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray: ...

    def next_observations(
        self, rows: np.ndarray, times: np.ndarray, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]: ...


def n_step_fields(
    tbuf: ObservationChains, rows: np.ndarray, times: np.ndarray, n: int, gamma: float
) -> dict[str, Any]:
    """Reward, next observation leaves, flags and discount of n-step transitions.

    The caller holds the buffer's lock. ``rows``/``times`` are int64 ``[B]``
    start transitions (stored). Returns a dict with ``reward`` ``[B, ...]``,
    ``discount`` ``[B]``, ``terminated``/``truncated`` bool ``[B]`` and
    ``next_observation`` (flat list of observation leaves ``[B, ...]``).
    """
    buffer = tbuf.replay_buffer
    flat, length = buffer.writer.flat_spec, buffer.writer.max_length
    steps = times[:, None] + np.arange(n)  # [B, n]
    slots = steps % length
    leaf_ids = [flat.index(name) for name in ("reward", "terminated", "truncated")]
    row_grid = np.broadcast_to(rows[:, None], steps.shape)
    reward, terminated, truncated = buffer.storage.gather(
        row_grid, slots, times=steps, leaf_ids=leaf_ids
    )
    broken = tbuf.chain_breaks(row_grid, slots)
    stop = terminated | truncated | broken | (steps + 1 >= buffer.table.clocks[rows, None])
    k = np.where(stop.any(axis=1), np.argmax(stop, axis=1) + 1, n).astype(np.int64)
    total, discount = discounted_sum(reward, k, gamma)
    batch = np.arange(len(rows))
    return {
        "reward": total,
        "discount": discount,
        "terminated": terminated[batch, k - 1],
        "truncated": truncated[batch, k - 1],
        "next_observation": tbuf.next_observations(rows, times + k - 1),
    }
