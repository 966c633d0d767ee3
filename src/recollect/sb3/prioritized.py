"""Prioritized replay (Schaul et al. 2016) behind SB3's buffer interface."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch as th

from recollect.errors import InvalidArgumentError
from recollect.samplers import LinearSchedule, Prioritized
from recollect.sb3.buffers import ReplayBuffer

__all__ = ["PrioritizedReplayBuffer"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) behind SB3's buffer interface.

    Transitions are drawn with ``P(i) = (p_i + epsilon)^alpha / sum_j (p_j + epsilon)^alpha``;
    new ones get the running max priority. ``sample`` returns
    :class:`~recollect.sb3.samples.PrioritizedReplayBufferSamples`: SB3's fields,
    then ``weights`` ``(N * P(i))^-beta / max`` and ``ids`` for
    :meth:`update_priorities`. :class:`recollect.sb3.DQN` uses both.

    Args:
        *args, **kwargs: as :class:`ReplayBuffer`.
        alpha: priority exponent >= 0 (0: uniform).
        beta: importance-sampling exponent >= 0, or a schedule called with the
            number of transitions added so far (SB3's ``num_timesteps``), e.g.
            ``recollect.LinearSchedule(0.4, 1.0, num_steps=total_timesteps)``.
        epsilon: added to every priority (> 0 keeps every transition drawable).

    Raises:
        InvalidArgumentError: an exponent or epsilon out of range.
    """

    prioritized: ClassVar[bool] = True

    def __init__(
        self,
        *args: Any,
        alpha: float = 0.6,
        beta: float | LinearSchedule | Any = 0.4,
        epsilon: float = 1e-6,
        **kwargs: Any,
    ) -> None:
        self.alpha, self.beta, self.epsilon = alpha, beta, epsilon
        if not callable(beta):
            Prioritized(importance_sampling_exponent=beta)  # validates beta now
        super().__init__(*args, **kwargs)

    def make_sampler(self) -> Prioritized:
        return Prioritized(priority_exponent=self.alpha, epsilon=self.epsilon)

    def current_beta(self) -> float:
        """``beta`` now: the schedule at the number of transitions added, or the constant."""
        return float(self.beta(self.num_added)) if callable(self.beta) else float(self.beta)

    def sample_options(self) -> dict[str, Any]:
        return {**super().sample_options(), "importance_sampling_exponent": self.current_beta()}

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets the priorities of sampled transitions (e.g. ``|TD error|``).

        Args:
            ids: ``samples.ids`` of a sample of this buffer.
            priorities: ``[B]`` floats >= 0 (numpy or a torch tensor on any device).

        Returns:
            The number of ids skipped because their transitions were overwritten.

        Raises:
            InvalidArgumentError: NaN, inf or negative priorities (nothing changes).
        """
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        return self.transitions.update_priorities(ids, np.asarray(priorities, np.float64))

    def config(self) -> dict[str, Any]:
        beta = self.beta
        if isinstance(beta, LinearSchedule):
            beta = {"start": beta.start, "end": beta.end, "num_steps": beta.num_steps}
        elif callable(beta):
            raise InvalidArgumentError(
                f"beta={beta!r} cannot be written to a pickle-free checkpoint; use a float or "
                "recollect.LinearSchedule, or SB3's save_replay_buffer (pickle)."
            )
        config = super().config()
        config["options"].update(alpha=self.alpha, beta=beta, epsilon=self.epsilon)
        return config

    @classmethod
    def options_from_config(cls, options: dict[str, Any]) -> dict[str, Any]:
        options = super().options_from_config(options)
        if isinstance(options.get("beta"), dict):
            options["beta"] = LinearSchedule(**options["beta"])
        return options
