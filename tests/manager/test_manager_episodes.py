"""ReplayBufferManager over TF-Agents ``Trajectory`` steps: windows never cross an episode
boundary, as the items Reverb's ``ReverbAddTrajectoryObserver`` writes (issue 39, section 5).

A ``Trajectory`` step ``(step_type, observation, action, ..., next_step_type)`` whose
``step_type`` is LAST is the boundary step (an episode's last time step -> the next
episode's first). TF-Agents' observer appends every step to its writer, makes an item of
the newest ``sequence_length`` steps once it holds that many, and forgets its cache after a
boundary step: items end on a boundary step but never hold one before their end.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_manager import Trajectory, trajectory_spec

import recollect as rc
from recollect.errors import InvalidArgumentError

gym = pytest.importorskip("gymnasium")

FIRST, MID, LAST = 0, 1, 2
SPEC = trajectory_spec()._replace(discount=rc.ArraySpec((), np.float32))


def collect(observer, num_envs: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` steps of ``num_envs`` CartPole envs with a random policy, in the
    ``Trajectory`` form a TF-Agents driver gives its observers (after a LAST time step the
    env resets: the boundary step's action is ignored). Returns the step types
    ``[num_envs, count]``."""
    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    obs = np.stack([env.reset(seed=seed + k)[0] for k, env in enumerate(envs)])
    step_type = np.full(num_envs, FIRST, np.int32)
    rng = np.random.default_rng(seed)
    written = []
    for _ in range(count):
        action = rng.integers(0, 2, num_envs)
        next_obs, next_type = np.empty_like(obs), np.empty(num_envs, np.int32)
        reward, discount = np.zeros(num_envs, np.float32), np.ones(num_envs, np.float32)
        for k, env in enumerate(envs):
            if step_type[k] == LAST:
                next_obs[k], next_type[k] = env.reset()[0], FIRST
                continue
            next_obs[k], reward[k], terminated, truncated, _ = env.step(int(action[k]))
            next_type[k] = LAST if terminated or truncated else MID
            discount[k] = 0.0 if terminated else 1.0
        observer(Trajectory(step_type, obs, action, (), next_type, reward, discount))
        written.append(step_type)
        obs, step_type = next_obs, next_type
    return np.stack(written, axis=1)


def reverb_item_starts(step_types: np.ndarray, sequence_length: int) -> list[tuple[int, int]]:
    """``(row, start)`` of the items TF-Agents' ``ReverbAddTrajectoryObserver`` (stride 1,
    no padding) writes for each row's steps, one observer per row."""
    items = []
    for row, types in enumerate(step_types):
        cached = 0
        for t, step_type in enumerate(types):
            cached += 1
            if cached >= sequence_length:
                items.append((row, t - sequence_length + 1))
            if step_type == LAST:  # is_boundary(): the observer resets its cache
                cached = 0
    return sorted(items, key=lambda rt: (rt[1], rt[0]))


def valid_windows(manager: rc.ReplayBufferManager, n: int) -> list[tuple[int, int]]:
    buffer = manager.replay_buffer
    rows, times = buffer.table.index.segments(n, buffer.writer.episode_aware).enumerate()
    return list(zip(rows.tolist(), times.tolist(), strict=True))


def crossing_fraction(manager: rc.ReplayBufferManager, batches: int = 20) -> float:
    """Fraction of sampled 2-step windows holding a boundary step before their last step."""
    data = manager.get_dataset(batch_size=256, num_steps=2, framework="numpy")
    crossing = [(next(data).data.step_type[:, 0] == LAST).mean() for _ in range(batches)]
    return float(np.mean(crossing))


@pytest.mark.parametrize("num_envs", [1, 4])
def test_cartpole_trajectory_windows_never_cross_an_episode_boundary(tmp_path, num_envs):
    manager = rc.ReplayBufferManager(
        SPEC, 800 * num_envs, tmp_path / "ck", 2, num_envs=num_envs, rng=0
    )
    _, observer = manager.create_replay_buffer()
    step_types = collect(observer, num_envs, 600)
    assert (step_types == LAST).sum() >= 15 * num_envs  # many episodes ended
    assert valid_windows(manager, 2) == reverb_item_starts(step_types, 2)
    assert valid_windows(manager, 3) == reverb_item_starts(step_types, 3)
    assert crossing_fraction(manager) == 0.0
    sample = manager.replay_buffer.sample(2048, 2)
    assert (sample.data.step_type[:, 1] == LAST).any()  # windows end on boundary steps
    manager.close()


def test_the_episode_ends_survive_a_checkpoint_and_new_ones_are_marked(tmp_path):
    manager = rc.ReplayBufferManager(SPEC, 1200, tmp_path / "ck", 2, num_envs=2, rng=0)
    _, observer = manager.create_replay_buffer()
    collect(observer, 2, 700)  # wraps the 600-step rows
    want = valid_windows(manager, 2)
    manager.checkpoint()
    manager.close()
    resumed = rc.ReplayBufferManager(SPEC, checkpoint_dir=tmp_path / "ck")
    buffer, observer = resumed.load_replay_buffer()
    assert buffer.config()["episode_end"] == ["step_type", LAST]
    assert valid_windows(resumed, 2) == want
    collect(observer, 2, 300, seed=9)
    assert crossing_fraction(resumed) == 0.0
    resumed.close()


def test_episode_end_false_keeps_tf_agents_uniform_buffer_windows_and_loads_are_checked(
    tmp_path,
):
    manager = rc.ReplayBufferManager(SPEC, 800, tmp_path / "ck", 2, rng=0, episode_end=False)
    _, observer = manager.create_replay_buffer()
    step_types = collect(observer, 1, 400)
    assert len(valid_windows(manager, 2)) == step_types.shape[1] - 1  # every stored pair
    assert crossing_fraction(manager) > 0.01  # episodes are crossed, as asked
    manager.checkpoint()
    manager.close()
    wrong = rc.ReplayBufferManager(SPEC, checkpoint_dir=tmp_path / "ck", episode_end=END_PAIR)
    with pytest.raises(
        InvalidArgumentError,
        match=r"has episode_end=False; the manager was given episode_end=\('step_type', 2\)",
    ):
        wrong.load_replay_buffer()
    same = rc.ReplayBufferManager(SPEC, checkpoint_dir=tmp_path / "ck", episode_end=False)
    assert not same.load_replay_buffer()[0].writer.episode_aware


END_PAIR = ("step_type", LAST)


def test_a_given_episode_end_reaches_the_buffer_and_is_checked_against_a_checkpoint(tmp_path):
    spec = {"x": rc.ArraySpec((), np.int32), "done": rc.ArraySpec((), np.bool_)}
    manager = rc.ReplayBufferManager(spec, 8, tmp_path / "ck", 2, rng=0)
    _, observer = manager.create_replay_buffer()  # not a Trajectory: no episode ends
    observer({"x": np.arange(6, dtype=np.int32)[None], "done": np.eye(1, 6, 2, dtype=bool)})
    assert len(valid_windows(manager, 2)) == 5
    manager.checkpoint()
    given = rc.ReplayBufferManager(spec, 8, tmp_path / "ck", 2, rng=0, episode_end="done")
    with pytest.raises(
        InvalidArgumentError,
        match=r"has episode_end=None \(the spec's bool is_last leaf, if any\); the manager "
        r"was given episode_end='done'",
    ):
        given.load_replay_buffer()
    _, observer = given.create_replay_buffer(overwrite=True)
    observer({"x": np.arange(6, dtype=np.int32)[None], "done": np.eye(1, 6, 2, dtype=bool)})
    assert [t for _, t in valid_windows(given, 2)] == [0, 1, 3, 4]  # none from step 2


def test_only_trajectory_specs_get_step_type_ends():
    from recollect.manager.checks import trajectory_episode_end

    assert trajectory_episode_end(SPEC) == END_PAIR
    assert trajectory_episode_end(SPEC._asdict()) == END_PAIR  # any nest of those leaves
    is_last = {**SPEC._asdict(), "is_last": rc.ArraySpec((), np.bool_)}
    assert trajectory_episode_end(is_last) is None  # is_last marks the ends itself
    no_next = {k: v for k, v in SPEC._asdict().items() if k != "next_step_type"}
    assert trajectory_episode_end(no_next) is None
    float_type = {**SPEC._asdict(), "step_type": rc.ArraySpec((), np.float32)}
    assert trajectory_episode_end(float_type) is None
    assert trajectory_episode_end(None) is None
