"""Guards the frame store against stacks it could not rebuild bit-exactly.

With ``frame_stack=`` only the newest frame of each observation is stored; a
stack is rebuilt from the frames of the previous steps of its env, and an
observation that does not continue the previous ``next_obs`` of its env starts
an episode whose missing frames are padding (zeros for SB3's ``VecFrameStack``).
That rebuild is exact only if such an observation really is padded that way.
:class:`StackStarts` checks it before anything is written, so a stream that
breaks the contract raises instead of replaying other observations than it
added.
"""

from __future__ import annotations

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.storage.frames.frame_store import FrameStack

__all__ = ["StackStarts"]


def _row_bytes(x: np.ndarray) -> np.ndarray:
    """uint8 ``[rows, nbytes]``: the bytes of each row of ``x`` (bitwise comparisons)."""
    return np.ascontiguousarray(x).reshape(len(x), -1).view(np.uint8)


class StackStarts:
    """Remembers each env's last ``next_obs`` and checks the padding of episode starts.

    Args:
        stack: the frame stack of the observation.
        obs_shape: per-step observation shape (stack axis included).
        dtype: observation dtype.
        n_envs: env rows.

    Attributes:
        previous: ``[n_envs, *obs_shape]`` last ``next_obs`` of each env.
        has_previous: bool ``[n_envs]``; False before the first add and after ``clear``.
    """

    def __init__(
        self, stack: FrameStack, obs_shape: tuple[int, ...], dtype: np.dtype, n_envs: int
    ) -> None:
        self.stack = stack
        self.axis = stack.axis % len(obs_shape) + 1  # in [n, *obs_shape] arrays
        self.previous = np.zeros((n_envs, *obs_shape), dtype)
        self.has_previous = np.zeros(n_envs, bool)

    @property
    def nbytes(self) -> int:
        return self.previous.nbytes + self.has_previous.nbytes

    def check(self, obs: np.ndarray) -> None:
        """Checks the stacks of ``obs`` ``[n_envs, *obs_shape]`` that start an episode.

        Raises:
            InvalidArgumentError: an observation that does not continue its env's
                previous ``next_obs`` holds other frames than padding before its
                newest frame; nothing is written.
        """
        chained = self.has_previous & (_row_bytes(obs) == _row_bytes(self.previous)).all(axis=1)
        starts = np.flatnonzero(~chained)
        if len(starts) == 0:
            return
        k = self.stack.stack_size
        first = obs[starts]
        pad = np.take(first, np.arange(k - 1), axis=self.axis)
        newest = np.take(first, [k - 1], axis=self.axis)
        if self.stack.custom_padding:
            expected = np.expand_dims(np.asarray(self.stack.padding, obs.dtype), self.axis - 1)
        elif self.stack.padding == "reset":
            expected = newest
        else:
            expected = np.zeros((), obs.dtype)
        expected = np.broadcast_to(expected, pad.shape)
        bad = (_row_bytes(pad) != _row_bytes(expected)).any(axis=1)
        if bad.any():
            envs = starts[bad].tolist()
            raise InvalidArgumentError(
                f"env(s) {envs}: the observation does not continue that env's previous next_obs, "
                f"so it starts an episode, but its first {k - 1} stacked frames are not "
                f"{self.stack.padding!r} padding. The frame store could not replay it exactly. "
                "Pass observations of VecFrameStack (zero-padded at resets) in order, or drop "
                "frame_stack."
            )

    def commit(self, next_obs: np.ndarray) -> None:
        """Records ``next_obs`` ``[n_envs, *obs_shape]`` after a successful add."""
        self.previous[...] = next_obs
        self.has_previous[:] = True

    def clear(self) -> None:
        """Forgets the previous observations (the next add starts every env's episode)."""
        self.has_previous[:] = False
