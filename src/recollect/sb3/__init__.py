"""Stable-Baselines3 integration: recollect's replay buffers inside SB3's off-policy algorithms.

Install with ``pip install -c constraints.txt "recollect[sb3]"``. ``import recollect``
never imports SB3 or torch; this module does.

Example:
    >>> import recollect.sb3
    >>> from stable_baselines3 import DQN
    >>> model = DQN("MlpPolicy", "CartPole-v1",
    ...             replay_buffer_class=recollect.sb3.ReplayBuffer)  # doctest: +SKIP
    >>> per = recollect.sb3.DQN("MlpPolicy", "CartPole-v1")  # prioritized replay  # doctest: +SKIP

- :class:`ReplayBuffer`: SB3's ``ReplayBuffer`` contract (Box and Dict spaces),
  SB3's arrays as views of recollect's storage (or each observation stored
  once with ``optimize_memory_usage``), ``frame_stack=`` for ``VecFrameStack``, ``n_step=``.
- :class:`DictReplayBuffer`, :class:`NStepReplayBuffer`: SB3's variants under
  their SB3 names (the same class, SB3's constructors).
- :class:`PrioritizedReplayBuffer`: adds ``alpha``, ``beta`` (or a schedule),
  ``epsilon``; samples carry ``weights`` and ``ids``.
- :class:`DQN` (and :class:`QRDQN` when sb3-contrib is installed): train with
  importance weights and update priorities with the TD errors.
"""

from __future__ import annotations

try:
    import stable_baselines3  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recollect.sb3 needs stable-baselines3: pip install -c constraints.txt 'recollect[sb3]'"
    ) from err

from recollect.sb3.buffers import ReplayBuffer
from recollect.sb3.dqn import DQN
from recollect.sb3.prioritized import PrioritizedReplayBuffer
from recollect.sb3.samples import PrioritizedReplayBufferSamples
from recollect.sb3.variants import DictReplayBuffer, NStepReplayBuffer

__all__ = [
    "DQN",
    "QRDQN",
    "DictReplayBuffer",
    "NStepReplayBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "ReplayBuffer",
]


def __getattr__(name: str):  # PEP 562: sb3-contrib is optional
    if name == "QRDQN":
        from recollect.sb3.qrdqn import QRDQN

        return QRDQN
    raise AttributeError(f"module 'recollect.sb3' has no attribute {name!r}")
