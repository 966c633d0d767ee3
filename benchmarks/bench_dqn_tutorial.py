"""TF-Agents' DQN tutorial (CartPole, Reverb form) on dm-reverb or on recollect.reverb.

The workload is TF-Agents' tutorial ``docs/tutorials/1_dqn_tutorial.ipynb`` in its current
Reverb form, with its hyperparameters: CartPole-v0, Q-network (100, 50), Adam 1e-3, 20,000
iterations of one collected step and one train step on a batch of 64 two-step windows from
``ReverbReplayBuffer.as_dataset(num_parallel_calls=3, sample_batch_size=64,
num_steps=2).prefetch(3)``, a table with a uniform selector, FIFO remover, ``MinSize(1)``
and 100,000 items, filled by ``ReverbAddTrajectoryObserver(sequence_length=2)``, and the
average return of 10 evaluation episodes every 1,000 iterations. The only difference
between the two arms is the three imports::

    import reverb                                                        # --replay reverb
    from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils

    import recollect.reverb as reverb                                    # --replay recollect
    from recollect.tf_agents import reverb_replay_buffer, reverb_utils

It needs TF-Agents 0.19 (TensorFlow 2.15, Python 3.11); run both arms with the same
interpreter set-up, e.g. ::

    python benchmarks/bench_dqn_tutorial.py --replay reverb --seed 0
    python benchmarks/bench_dqn_tutorial.py --replay recollect --seed 0

Prints one JSON line: the arm, the seed, the CPU time (user + system, seconds), the wall
time, the evaluation returns and the final one. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replay", choices=("reverb", "recollect"), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.replay == "reverb":
        import reverb
        from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
    else:
        sys.modules["reverb"] = None  # type: ignore[assignment]  # dm-reverb stays out of this arm
        import recollect.reverb as reverb
        from recollect.tf_agents import reverb_replay_buffer, reverb_utils

    import numpy as np
    import tensorflow as tf
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.drivers import py_driver
    from tf_agents.environments import suite_gym, tf_py_environment
    from tf_agents.networks import sequential
    from tf_agents.policies import py_tf_eager_policy, random_tf_policy
    from tf_agents.specs import tensor_spec
    from tf_agents.utils import common

    random.seed(args.seed)
    np.random.seed(args.seed)  # noqa: NPY002  # TF-Agents' random policies draw from it
    tf.random.set_seed(args.seed)
    start_cpu, start_wall = cpu_seconds(), time.perf_counter()

    initial_collect_steps, collect_steps_per_iteration = 100, 1
    replay_buffer_max_length, batch_size, learning_rate = 100_000, 64, 1e-3
    num_eval_episodes, eval_interval = 10, 1_000

    env = suite_gym.load("CartPole-v0")
    env.seed(args.seed)
    train_py_env = suite_gym.load("CartPole-v0")
    eval_py_env = suite_gym.load("CartPole-v0")
    train_py_env.seed(args.seed)
    eval_py_env.seed(args.seed + 1)
    train_env = tf_py_environment.TFPyEnvironment(train_py_env)
    eval_env = tf_py_environment.TFPyEnvironment(eval_py_env)

    num_actions = env.action_spec().maximum - env.action_spec().minimum + 1
    hidden = [
        tf.keras.layers.Dense(
            units,
            activation=tf.keras.activations.relu,
            kernel_initializer=tf.keras.initializers.VarianceScaling(
                scale=2.0, mode="fan_in", distribution="truncated_normal"
            ),
        )
        for units in (100, 50)
    ]
    q_values = tf.keras.layers.Dense(
        num_actions,
        activation=None,
        kernel_initializer=tf.keras.initializers.RandomUniform(minval=-0.03, maxval=0.03),
        bias_initializer=tf.keras.initializers.Constant(-0.2),
    )
    q_net = sequential.Sequential([*hidden, q_values])
    agent = dqn_agent.DqnAgent(
        train_env.time_step_spec(),
        train_env.action_spec(),
        q_network=q_net,
        optimizer=tf.keras.optimizers.Adam(learning_rate=learning_rate),
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0),
    )
    agent.initialize()
    random_policy = random_tf_policy.RandomTFPolicy(
        train_env.time_step_spec(), train_env.action_spec()
    )

    def compute_avg_return(environment, policy, num_episodes=10):  # type: ignore[no-untyped-def]
        total = 0.0
        for _ in range(num_episodes):
            time_step = environment.reset()
            episode_return = 0.0
            while not time_step.is_last():
                time_step = environment.step(policy.action(time_step).action)
                episode_return += time_step.reward
            total += episode_return
        return float((total / num_episodes).numpy()[0])

    table_name = "uniform_table"
    signature = tensor_spec.add_outer_dim(tensor_spec.from_spec(agent.collect_data_spec))
    table = reverb.Table(
        table_name,
        max_size=replay_buffer_max_length,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    reverb_server = reverb.Server([table])
    replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
        agent.collect_data_spec,
        table_name=table_name,
        sequence_length=2,
        local_server=reverb_server,
    )
    rb_observer = reverb_utils.ReverbAddTrajectoryObserver(
        replay_buffer.py_client, table_name, sequence_length=2
    )
    py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(random_policy, use_tf_function=True),
        [rb_observer],
        max_steps=initial_collect_steps,
    ).run(train_py_env.reset())
    dataset = replay_buffer.as_dataset(
        num_parallel_calls=3, sample_batch_size=batch_size, num_steps=2
    ).prefetch(3)
    iterator = iter(dataset)

    agent.train = common.function(agent.train)
    agent.train_step_counter.assign(0)
    returns = [compute_avg_return(eval_env, agent.policy, num_eval_episodes)]
    time_step = train_py_env.reset()
    collect_driver = py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(agent.collect_policy, use_tf_function=True),
        [rb_observer],
        max_steps=collect_steps_per_iteration,
    )
    for _ in range(args.iterations):
        time_step, _ = collect_driver.run(time_step)
        experience, _unused_info = next(iterator)
        agent.train(experience)
        step = int(agent.train_step_counter.numpy())
        if step % eval_interval == 0:
            returns.append(compute_avg_return(eval_env, agent.policy, num_eval_episodes))
    rb_observer.close()
    reverb_server.stop()
    print(
        json.dumps(
            {
                "replay": args.replay,
                "seed": args.seed,
                "iterations": args.iterations,
                "cpu_s": round(cpu_seconds() - start_cpu, 1),
                "wall_s": round(time.perf_counter() - start_wall, 1),
                "returns": [round(r, 1) for r in returns],
                "final_return": round(returns[-1], 1),
                "best_return": round(max(returns), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
