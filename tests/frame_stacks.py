"""Frame-stack test helpers: fake envs that stack frames like gymnasium, and a naive reference.

Shared by tests/storage/frames/ and tests/storage/compression/: every stacked observation the
fake env produced is kept by its item id, and every sample is checked against it.
"""

from __future__ import annotations

import collections

import numpy as np

import recollect as rc

DTYPES = [np.uint8, np.float16, np.int32, np.float32]


class StackingEnvs:
    """``num_envs`` fake envs stacking random frames like gymnasium's FrameStackObservation."""

    def __init__(self, num_envs, frame_shape, dtype, k, axis, padding, seed, end_prob):
        self.rng = np.random.default_rng(seed)
        self.num_envs, self.frame_shape, self.dtype = num_envs, frame_shape, dtype
        self.k, self.axis, self.padding, self.end_prob = k, axis, padding, end_prob
        self.queues = [None] * num_envs
        self.ending = np.ones(num_envs, bool)  # the previous step ended: next one resets

    def _frame(self):
        return self.rng.integers(0, 100, self.frame_shape).astype(self.dtype)

    def step(self):
        """Returns (stacked obs [E, *shape], is_first [E], is_last [E])."""
        is_first = self.ending.copy()
        out = []
        for e in range(self.num_envs):
            frame = self._frame()
            if is_first[e]:
                if isinstance(self.padding, str):
                    pad = frame if self.padding == "reset" else np.zeros_like(frame)
                else:
                    pad = np.asarray(self.padding, self.dtype)
                self.queues[e] = collections.deque([pad] * self.k, maxlen=self.k)
            self.queues[e].append(frame)
            out.append(np.stack(list(self.queues[e]), axis=self.axis))
        self.ending = self.rng.random(self.num_envs) < self.end_prob
        return np.stack(out), is_first, self.ending.copy()


def make_buffer(
    num_envs, max_length, k, axis, padding, dtype, markers, frame_shape=(2, 3), contiguous=False
):
    shape = list(frame_shape)
    shape.insert(axis % (len(frame_shape) + 1), k)
    spec = {"observation": rc.ArraySpec(tuple(shape), dtype), "action": rc.ArraySpec((), np.int32)}
    for name in markers:
        spec[name] = rc.ArraySpec((), bool)
    stack = rc.FrameStack(stack_size=k, axis=axis, padding=padding, contiguous=contiguous)
    stacks = {"observation": stack}
    return rc.ReplayBuffer(spec, num_envs * max_length, num_envs, rng=0, frame_stacks=stacks)


def fill(buf, envs, steps, markers, recorded, clear_at=None):
    for t in range(steps):
        if clear_at is not None and t == clear_at:
            buf.clear()
        obs, is_first, is_last = envs.step()
        step = {"observation": obs, "action": np.arange(buf.num_envs, dtype=np.int32) + t}
        flags = {"is_first": is_first, "is_last": is_last}
        step.update({m: flags[m] for m in markers})
        t_now = int(buf.table.index.t[0])
        for e in range(buf.num_envs):
            recorded[int(rc.ids.encode(e, t_now))] = obs[e]
        buf.add_batch(step)


def check_sample(buf, recorded, batch, num_steps):
    s = buf.sample(batch, num_steps)
    obs = s.data["observation"]
    n = num_steps or 1
    for b, item in enumerate(s.ids):
        for j in range(n):
            got = obs[b, j] if num_steps else obs[b]
            want = recorded[int(item) + j]
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    return s
