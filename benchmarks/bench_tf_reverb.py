"""ReverbReplayBuffer.as_dataset and TrajectoryDataset.batch transitions/s on W2 data
(obs float32[17], act float32[6]; items of 2 steps, 9980 of them), recollect or dm-reverb.

    python benchmarks/bench_tf_reverb.py                     # recollect.reverb
    /work/reverb-venv/bin/python benchmarks/bench_tf_reverb.py --dm-reverb   # baseline

Not a test: prints transitions/s of each pipeline over ``--seconds`` of iteration.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dm-reverb", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    if args.dm_reverb:
        import reverb
        from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
    else:
        import recollect.reverb as reverb
        from recollect.tf_agents import reverb_replay_buffer, reverb_utils
    try:  # TF-Agents' own Trajectory where installed (its observer needs is_boundary)
        from tf_agents.trajectories.trajectory import Trajectory as trajectory
    except ImportError:
        trajectory = collections.namedtuple(  # type: ignore[misc]
            "Trajectory",
            [
                "step_type",
                "observation",
                "action",
                "policy_info",
                "next_step_type",
                "reward",
                "discount",
            ],
        )
    spec = trajectory(
        tf.TensorSpec([], tf.int32),
        tf.TensorSpec([17], tf.float32),
        tf.TensorSpec([6], tf.float32),
        (),
        tf.TensorSpec([], tf.int32),
        tf.TensorSpec([], tf.float32),
        tf.TensorSpec([], tf.float32),
    )
    table = reverb.Table(
        "uniform",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100_000,
        reverb.rate_limiters.MinSize(1),
    )
    checkpointer = reverb.platform.checkpointers_lib.DefaultCheckpointer(tempfile.mkdtemp())
    server = reverb.Server([table], port=None, checkpointer=checkpointer)
    rb = reverb_replay_buffer.ReverbReplayBuffer(spec, "uniform", 2, local_server=server)
    observer = reverb_utils.ReverbAddTrajectoryObserver(rb.py_client, "uniform", 2, 1)
    rng = np.random.default_rng(0)
    for _ in range(20):
        for i in range(500):
            st = 0 if i == 0 else (2 if i == 499 else 1)
            nst = 2 if i == 498 else (0 if i == 499 else 1)
            observer(
                trajectory(
                    np.int32(st),
                    rng.random(17, dtype=np.float32),
                    rng.random(6, dtype=np.float32),
                    (),
                    np.int32(nst),
                    np.float32(1),
                    np.float32(1),
                )
            )
    observer.flush()
    sig = tf.nest.map_structure(lambda s: tf.TensorSpec([2, *s.shape], s.dtype), spec)
    pipelines = {
        "ReverbReplayBuffer.as_dataset": rb.as_dataset(
            sample_batch_size=args.batch, num_steps=2, num_parallel_calls=3
        ).prefetch(3),
        "TrajectoryDataset.batch": reverb.TrajectoryDataset(
            f"localhost:{server.port}",
            "uniform",
            tf.nest.map_structure(lambda s: s.dtype, sig),
            tf.nest.map_structure(lambda s: s.shape, sig),
            2 * args.batch,
        )
        .batch(args.batch)
        .prefetch(3),
    }
    for name, dataset in pipelines.items():
        iterator = iter(dataset)
        next(iterator)
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < args.seconds:
            next(iterator)
            n += args.batch
        print(f"{name}: {n / (time.perf_counter() - start):,.0f} transitions/s")


if __name__ == "__main__":
    main()
