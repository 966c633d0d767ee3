"""A real gymnasium CartPole-v1 vector env (4 envs) fills both buffers; samples replay it exactly.

The ground truth is recorded in plain Python lists while stepping and compared
by item id (``recollect.ids.encode(row, t)``).
"""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc

gym = pytest.importorskip("gymnasium")

NUM_ENVS = 4
STEPS = 300  # CartPole episodes under random actions last ~10-40 steps: many episode ends


def is_outside_bounds(obs: np.ndarray) -> np.ndarray:
    """CartPole terminates when |x| > 2.4 or |theta| > 12 degrees; reset states are within 0.05."""
    return (np.abs(obs[..., 0]) > 2.4) | (np.abs(obs[..., 2]) > 12 * 2 * np.pi / 360)


def make_env(mode):
    return gym.make_vec(
        "CartPole-v1",
        num_envs=NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
    )


def rlds_spec(env) -> dict:
    return {
        "observation": rc.spec_from_space(env.single_observation_space),
        "action": rc.spec_from_space(env.single_action_space),
        "reward": rc.ArraySpec((), np.float32),
        "discount": rc.ArraySpec((), np.float32),
        "is_first": rc.ArraySpec((), np.bool_),
        "is_last": rc.ArraySpec((), np.bool_),
        "is_terminal": rc.ArraySpec((), np.bool_),
    }


def collect_rlds(env, buf: rc.ReplayBuffer, steps: int) -> list[list[dict]]:
    """NEXT_STEP autoreset: the step after a done returns the reset obs and ignores its action.

    That ignored step is exactly RLDS's last step of the episode: its
    observation is the final observation, ``is_last`` is set and ``reward`` is 0.
    """
    rng = np.random.default_rng(0)
    truth: list[list[dict]] = [[] for _ in range(NUM_ENVS)]
    obs, _ = env.reset(seed=0)
    first = np.ones(NUM_ENVS, bool)
    ended, terminal = np.zeros(NUM_ENVS, bool), np.zeros(NUM_ENVS, bool)
    for _ in range(steps):
        action = rng.integers(0, 2, NUM_ENVS)
        next_obs, reward, term, trunc, _ = env.step(action)
        assert not reward[ended].any()  # the ignored step after a done
        batch = {
            "observation": obs,
            "action": action,
            "reward": reward.astype(np.float32),
            "discount": np.where(terminal, 0.0, 1.0).astype(np.float32),
            "is_first": first,
            "is_last": ended,
            "is_terminal": terminal,
        }
        buf.add_batch(batch)
        for row in range(NUM_ENVS):
            truth[row].append({k: np.array(v[row]) for k, v in batch.items()})
        first, obs = ended, next_obs
        ended, terminal = term | trunc, term.copy()
    return truth


def test_replay_buffer_rlds_windows_replay_cartpole_exactly():
    env = make_env(gym.vector.AutoresetMode.NEXT_STEP)
    buf = rc.ReplayBuffer(rlds_spec(env), capacity=NUM_ENVS * 128, num_envs=NUM_ENVS, rng=0)
    truth = collect_rlds(env, buf, STEPS)
    env.close()
    lo = STEPS - 128  # the ring wrapped: only the newest 128 steps per row are stored
    stored = buf.gather_all()
    for row in range(NUM_ENVS):
        np.testing.assert_array_equal(
            stored["observation"][row], [s["observation"] for s in truth[row][lo:]]
        )
    ends = np.array([[s["is_last"] for s in truth[r]] for r in range(NUM_ENVS)])
    assert ends[:, lo:].sum() > 8 and (ends.sum(axis=1) > 1).all()
    s = buf.sample(512, num_steps=3)
    for b, item_id in enumerate(s.ids.tolist()):
        _, row, t = (int(x) for x in rc.ids.decode(item_id))
        assert lo <= t <= STEPS - 3
        for key, leaf in s.data.items():
            np.testing.assert_array_equal(leaf[b], [truth[row][t + k][key] for k in range(3)])
    last = s.data["is_last"]
    assert not last[:, :2].any()  # windows never cross an episode end
    # Dynamics: inside a window the next observation follows from the env, and the
    # last step of a terminated episode really lies outside CartPole's bounds.
    terminal_obs = s.data["observation"][s.data["is_terminal"]]
    assert len(terminal_obs) and is_outside_bounds(terminal_obs).all()
    reset_obs = s.data["observation"][s.data["is_first"]]
    assert len(reset_obs) and (np.abs(reset_obs) <= 0.05).all()
    np.testing.assert_array_equal(s.data["discount"] == 0, s.data["is_terminal"])


def test_transition_buffer_replays_cartpole_exactly():
    """SAME_STEP autoreset: the final observation of a done env is in info['final_obs']."""
    env = make_env(gym.vector.AutoresetMode.SAME_STEP)
    buf = rc.TransitionBuffer(capacity=NUM_ENVS * 100, num_envs=NUM_ENVS, rng=1)
    rng = np.random.default_rng(1)
    truth: dict[int, dict] = {}
    obs, _ = env.reset(seed=1)
    for t in range(STEPS):
        action = rng.integers(0, 2, NUM_ENVS)
        next_obs, reward, term, trunc, info = env.step(action)
        real_next = next_obs.copy()
        done = term | trunc
        for row in np.flatnonzero(done):
            real_next[row] = info["final_obs"][row]
        buf.add(obs, action, reward, real_next, term, trunc)
        for row in range(NUM_ENVS):
            truth[int(rc.ids.encode(row, t))] = {
                "observation": obs[row].copy(),
                "action": action[row],
                "reward": reward[row],
                "next_observation": real_next[row].copy(),
                "terminated": term[row],
                "truncated": trunc[row],
            }
        obs = next_obs
    env.close()
    assert len(buf) == NUM_ENVS * 100
    s = buf.sample(1024)
    assert s.terminated.sum() > 5
    for b, item_id in enumerate(s.ids.tolist()):
        assert rc.ids.decode(item_id)[2] >= STEPS - 100
        want = truth[item_id]
        np.testing.assert_array_equal(s.observation[b], want["observation"])
        np.testing.assert_array_equal(s.next_observation[b], want["next_observation"])
        assert s.action[b] == want["action"] and s.reward[b] == want["reward"]
        assert s.terminated[b] == want["terminated"] and s.truncated[b] == want["truncated"]
    assert is_outside_bounds(s.next_observation[s.terminated]).all()
    assert not is_outside_bounds(s.observation).any()
