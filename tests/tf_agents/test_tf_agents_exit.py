"""Scripts that iterate an as_dataset(..., num_parallel_calls=N) inside a tf.function exit.

At interpreter shutdown TensorFlow destroys the parallel ``map`` iterator
while its runner threads may be inside our ``tf.numpy_function`` sampler;
recollect.tf_data stops and drains those calls at ``atexit`` so the process
ends. Each shape runs ``RUNS`` times in a subprocess with a timeout
(``--run-slow`` runs the 30-run variant of the issue).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

RUNS = 1  # per shape in the default run; test_thirty_runs_exit (slow) runs 30
TIMEOUT_S = 120

SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    if sys.argv[1] == "tf_data":
        from recollect import ArraySpec, ReplayBuffer
        from recollect.adapters import tf_data
        buf = ReplayBuffer({"x": ArraySpec((4,), np.float32)}, 4000, num_envs=4, rng=0)
        def add(t):
            buf.add_batch({"x": np.full((4, 4), t, np.float32)})
        for t in range(20):
            add(t)
        ds = tf_data.as_dataset(buf, 64, 2, num_parallel_calls=3)
    else:
        from recollect.tf_agents import TFUniformReplayBuffer
        rb = TFUniformReplayBuffer({"x": tf.TensorSpec((4,), tf.float32)}, 4, 1000)
        def add(t):
            rb.add_batch({"x": tf.fill((4, 4), float(t))})
        for t in range(20):
            add(t)
        ds = rb.as_dataset(64, 2, num_parallel_calls=3).prefetch(3)
    iterator = iter(ds)

    @tf.function
    def train():
        items, info = next(iterator)
        return tf.reduce_sum(items["x"])

    for t in range(50):
        add(t)
        train()
    print("last line", flush=True)
    """
)


def _hangs(shape: str, runs: int) -> int:
    hung = 0
    for _ in range(runs):
        try:
            out = subprocess.run(
                [sys.executable, "-c", SCRIPT, shape],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
        except subprocess.TimeoutExpired:
            hung += 1
            continue
        assert out.returncode == 0, out.stderr[-2000:]
        assert "last line" in out.stdout
    return hung


@pytest.mark.parametrize(
    "shape",
    [pytest.param(s, marks=pytest.mark.slow) for s in ("tf_data", "tf_agents")],  # ~5 s each: CI
)
def test_script_with_parallel_calls_in_tf_function_exits(shape):
    assert _hangs(shape, RUNS) == 0


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["tf_data", "tf_agents"])
def test_thirty_runs_exit(shape):
    assert _hangs(shape, 30) == 0
