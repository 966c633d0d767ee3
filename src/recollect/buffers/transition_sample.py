"""The sample type of :class:`~recollect.TransitionBuffer` and its argument checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import optree

from recollect.arguments import positive_int
from recollect.buffers.sample import nest_repr
from recollect.errors import InvalidArgumentError
from recollect.nstep import check_discount
from recollect.specs import ArraySpec, spec_from_example

__all__ = ["FIELDS", "TransitionSample", "n_step_args", "step_spec", "transition_spec"]

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


def step_spec(
    observation: Any, action: Any, reward: Any, num_envs: int, with_first: bool
) -> dict[str, Any]:
    """The stored step's spec, inferred from a TransitionBuffer's first add.

    ``observation``, ``action``, ``reward`` as passed (with a leading env dim when
    ``num_envs > 1``); dtypes are kept, except that an integer or bool reward is stored
    as float32. ``with_first``: add ``"is_first"`` (a frame-stacked observation).
    """
    lead = num_envs > 1

    def strip(x: Any) -> Any:
        spec = spec_from_example(x)
        if not lead:
            return spec
        return optree.tree_map(lambda s: ArraySpec(s.shape[1:], s.dtype), spec)

    reward_spec = strip(reward)
    if isinstance(reward_spec, ArraySpec) and reward_spec.dtype.kind in "biu":
        # An int first reward (often 0) must not turn later float rewards into errors.
        reward_spec = ArraySpec(reward_spec.shape, np.float32)
    spec = {
        "observation": strip(observation),
        "action": strip(action),
        "reward": reward_spec,
        "terminated": ArraySpec((), np.bool_),
        "truncated": ArraySpec((), np.bool_),
    }
    if with_first:  # episode starts = chain breaks (set in add)
        spec["is_first"] = ArraySpec((), np.bool_)
    return spec
