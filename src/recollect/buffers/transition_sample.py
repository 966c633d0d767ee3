"""The sample type of :class:`~recollect.TransitionBuffer` and its argument checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers.sample import nest_repr
from recollect.errors import InvalidArgumentError
from recollect.nstep import check_discount

__all__ = ["FIELDS", "TransitionSample", "n_step_args", "transition_spec"]

#: The transition fields of a sample's ``data`` and of a TransitionBuffer's ``data_spec``.
FIELDS = ("observation", "action", "reward", "next_observation", "terminated", "truncated")


@dataclasses.dataclass(frozen=True)
class TransitionSample:
    """A batch of transitions; every field has leading dim ``batch_size``.

    ``terminated`` is a real termination (no bootstrapping); ``truncated`` a
    time limit or other cut (bootstrap from ``next_observation``).

    It unpacks like the tuples of a ``deque``/``random.choices`` buffer:
    ``obs, action, reward, next_obs, done = buf.sample(64)``, where ``done`` is
    ``terminated`` (the flag to stop bootstrapping at). Attribute access is
    unchanged.
    """

    observation: Any
    action: Any
    reward: np.ndarray
    next_observation: Any
    terminated: np.ndarray
    truncated: np.ndarray
    ids: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None
    #: ``[B]`` bootstrap discount ``gamma^k`` of n-step samples (``sample(n_step=...)``), else None.
    discount: np.ndarray | None = None

    def __repr__(self) -> str:
        return nest_repr(self)

    @property
    def data(self) -> dict[str, Any]:
        """The transition fields as a dict (``FIELDS``), as a reader of a
        :class:`~recollect.Sample` takes them (``recollect.tf_data.as_dataset``)."""
        return {name: getattr(self, name) for name in FIELDS}

    def __iter__(self) -> Iterator[Any]:
        """Yields ``observation, action, reward, next_observation, terminated``."""
        return iter(
            (self.observation, self.action, self.reward, self.next_observation, self.terminated)
        )


def transition_spec(step_spec: dict[str, Any]) -> dict[str, Any]:
    """The spec of one sampled transition (``FIELDS``) from the spec of a stored step."""
    return {
        "observation": step_spec["observation"],
        "action": step_spec["action"],
        "reward": step_spec["reward"],
        "next_observation": step_spec["observation"],
        "terminated": step_spec["terminated"],
        "truncated": step_spec["truncated"],
    }


def n_step_args(n_step: Any, discount: Any) -> tuple[int, float | None]:
    """``(n, gamma)`` of ``sample(n_step=, discount=)``; ``gamma`` None means 1-step sampling.

    Raises:
        InvalidArgumentError: ``n_step`` < 1, ``n_step`` without ``discount``, or a
            discount outside ``[0, 1]``.
    """
    if n_step is None and discount is None:
        return 1, None
    n = 1 if n_step is None else positive_int("n_step", n_step)
    if discount is None:
        raise InvalidArgumentError(
            f"n-step sampling needs a discount; got n_step={n_step}, discount=None. Pass e.g. "
            "discount=0.99."
        )
    return n, check_discount(discount)
