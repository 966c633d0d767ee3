"""recollect.sb3 buffers expose SB3's arrays, attributes and ``_get_samples``, as SB3 does.

Every scenario runs against SB3's real buffer fed the same ``add`` calls: the
arrays (``observations`` ... ``timeouts``), their shapes and dtypes, the
counters and what ``_get_samples`` returns (with numpy's global RNG seeded
alike, since both draw the env of each sample from it) must be equal.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
import torch as th
from stable_baselines3.common import buffers as sb3_buffers

import recollect.sb3
from recollect.errors import InvalidArgumentError

ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ATTRS = ("pos", "full", "buffer_size", "n_envs", "obs_shape", "action_dim", "device")


def seed_global(seed: int) -> None:
    """Seeds numpy's global RNG, which SB3's ``_get_samples`` (and ours) draw envs from."""
    np.random.seed(seed)  # noqa: NPY002


def spaces(kind: str) -> tuple[gym.Space, gym.Space]:
    if kind == "box":
        return gym.spaces.Box(-1, 1, (3, 2), np.float32), gym.spaces.Box(-1, 1, (2,), np.float64)
    if kind == "discrete":
        return gym.spaces.Discrete(7), gym.spaces.MultiDiscrete([3, 4])
    return (
        gym.spaces.Dict(
            {"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "id": gym.spaces.Discrete(5)}
        ),
        gym.spaces.Discrete(3),
    )


def stream(obs_space: gym.Space, act_space: gym.Space, n_envs: int, steps: int, seed: int):
    """SB3 ``add`` arguments: random values, dones, and timeouts in a list of info dicts."""
    obs_space.seed(seed)
    act_space.seed(seed + 1)
    rng = np.random.default_rng(seed)

    def batch(space: gym.Space) -> object:
        values = [space.sample() for _ in range(n_envs)]
        if isinstance(space, gym.spaces.Dict):
            return {k: np.stack([np.asarray(v[k]) for v in values]) for k in space.spaces}
        return np.stack([np.asarray(v) for v in values])

    for _ in range(steps):
        done = rng.random(n_envs) < 0.3
        timeout = done & (rng.random(n_envs) < 0.5)
        infos = [{"TimeLimit.truncated": bool(t)} if t else {} for t in timeout]
        reward = rng.standard_normal(n_envs).astype(np.float32)
        yield batch(obs_space), batch(obs_space), batch(act_space), reward, done, infos


def pair(kind: str, n_envs: int, size: int = 12, **kwargs) -> tuple:
    obs_space, act_space = spaces(kind)
    cls = {"dict": "DictReplayBuffer", "nstep": "NStepReplayBuffer"}.get(
        kwargs.pop("variant", ""), "ReplayBuffer"
    )
    sb3 = getattr(sb3_buffers, cls)(size, obs_space, act_space, "cpu", n_envs, **kwargs)
    ours = getattr(recollect.sb3, cls)(size, obs_space, act_space, "cpu", n_envs, **kwargs)
    return sb3, ours, obs_space, act_space


def feed(sb3, ours, obs_space, act_space, n_envs: int, steps: int, seed: int = 0) -> None:
    for args in stream(obs_space, act_space, n_envs, steps, seed):
        sb3.add(*[_copy(a) for a in args])
        ours.add(*[_copy(a) for a in args])


def _copy(a: object) -> object:
    if isinstance(a, dict):
        return {k: v.copy() for k, v in a.items()}
    return a.copy() if isinstance(a, np.ndarray) else a


def assert_same_arrays(sb3, ours) -> None:
    for name in ARRAYS:
        want, got = getattr(sb3, name), getattr(ours, name)
        if isinstance(want, dict):
            assert want.keys() == got.keys()
            for key in want:
                assert got[key].dtype == want[key].dtype, (name, key)
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}/{key}")
        else:
            assert (got.shape, got.dtype) == (want.shape, want.dtype), name
            np.testing.assert_array_equal(got, want, err_msg=name)
    for name in ATTRS:
        assert getattr(ours, name) == getattr(sb3, name), name


def assert_same_samples(want, got) -> None:
    assert type(got).__name__ == type(want).__name__
    for field in want._fields:
        a, b = getattr(want, field), getattr(got, field)
        if a is None:
            assert b is None, field
            continue
        a, b = (a, b) if isinstance(a, dict) else ({"": a}, {"": b})
        for key in a:
            assert b[key].dtype == a[key].dtype, (field, key)
            assert b[key].shape == a[key].shape, (field, key)
            th.testing.assert_close(b[key], a[key], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["box", "discrete", "dict"])
@pytest.mark.parametrize("n_envs", [1, 3])
def test_arrays_counters_and_get_samples_equal_sb3s(kind, n_envs):
    variant = "dict" if kind == "dict" else ""
    sb3, ours, obs_space, act_space = pair(kind, n_envs, size=n_envs * 5, variant=variant)
    for steps in (3, 9):  # before and after the ring wraps around
        feed(sb3, ours, obs_space, act_space, n_envs, steps, seed=steps)
        assert_same_arrays(sb3, ours)
        batch_inds = np.random.default_rng(steps).integers(0, sb3.size(), 40)
        seed_global(steps)
        want = sb3._get_samples(batch_inds)
        seed_global(steps)
        assert_same_samples(want, ours._get_samples(batch_inds))


def test_arrays_are_views_of_the_stored_transitions():
    sb3, ours, obs_space, act_space = pair("box", 2, size=8)
    feed(sb3, ours, obs_space, act_space, 2, 5)
    storage = ours.transitions.replay_buffer.storage
    for name in ARRAYS:
        assert any(np.shares_memory(getattr(ours, name), a) for a in storage.arrays), name
    ours.rewards[1, 0] = 42.0  # a write through the view is what sample() reads
    assert (ours.sample(256).rewards == 42.0).any()


def test_writing_dones_cuts_n_step_returns_as_in_sb3():
    """SB3's n-step tests mark ends by writing ``dones`` (and ``timeouts``) directly."""
    sb3, ours, obs_space, act_space = pair("box", 1, size=20, variant="nstep", n_steps=4)
    sb3.gamma = ours.gamma = 0.5  # SB3 reads gamma at sampling time: so do we
    feed(sb3, ours, obs_space, act_space, 1, 14)
    for buf in (sb3, ours):
        buf.dones[:] = 0.0
        buf.timeouts[:] = 0.0
        buf.rewards[:] = 1.0
        buf.dones[5] = True
        buf.timeouts[9] = True
    assert ours.n_steps == 4
    batch_inds = np.arange(14)
    seed_global(0)
    want = sb3._get_samples(batch_inds)
    seed_global(0)
    got = ours._get_samples(batch_inds)
    assert_same_samples(want, got)
    # rewards summed up to the written done (index 5), the timeout (9) and the newest (13)
    np.testing.assert_allclose(got.rewards[4:7, 0].numpy(), [1.5, 1.0, 1.875])
    assert got.dones[5, 0] == 1.0 and got.dones[9, 0] == 0.0
    np.testing.assert_allclose(got.discounts[12:14, 0].numpy(), [0.25, 0.5])


@pytest.mark.parametrize("n_envs", [1, 2])
def test_n_step_get_samples_equal_sb3s_n_step_buffer(n_envs):
    sb3, ours, obs_space, act_space = pair("box", n_envs, size=10 * n_envs, variant="nstep")
    for steps in (6, 13):
        feed(sb3, ours, obs_space, act_space, n_envs, steps, seed=steps)
        assert_same_arrays(sb3, ours)
        batch_inds = np.random.default_rng(steps).integers(0, sb3.size(), 64)
        seed_global(steps)
        want = sb3._get_samples(batch_inds)
        seed_global(steps)
        assert_same_samples(want, ours._get_samples(batch_inds))


def test_sample_draws_stored_transitions_with_sb3_dtypes():
    sb3, ours, obs_space, act_space = pair("box", 1, size=6)
    feed(sb3, ours, obs_space, act_space, 1, 4)
    got = ours.sample(500)
    stored = {tuple(o.ravel()) for o in ours.observations[: ours.pos, 0]}
    assert {tuple(o.ravel()) for o in got.observations.numpy()} == stored  # all 4, no other
    want = sb3.sample(3)
    for field in ("observations", "actions", "next_observations", "dones", "rewards"):
        assert getattr(got, field).dtype == getattr(want, field).dtype, field
        assert getattr(got, field).shape[1:] == getattr(want, field).shape[1:], field


def test_prioritized_buffer_has_sb3s_arrays_and_get_samples():
    obs_space, act_space = spaces("box")
    sb3 = sb3_buffers.ReplayBuffer(8, obs_space, act_space, "cpu", 2)
    ours = recollect.sb3.PrioritizedReplayBuffer(8, obs_space, act_space, "cpu", 2, rng=0)
    feed(sb3, ours, obs_space, act_space, 2, 6)
    assert_same_arrays(sb3, ours)
    seed_global(1)
    want = sb3._get_samples(np.arange(4))
    seed_global(1)
    got = ours._get_samples(np.arange(4))
    for field in want._fields[:5]:
        th.testing.assert_close(getattr(got, field), getattr(want, field))
    draw = ours.draw(32)
    batch_inds, env_inds = ours.locate(draw.ids)
    np.testing.assert_array_equal(
        draw.samples.observations.numpy(), ours.observations[batch_inds, env_inds]
    )


def test_buffers_storing_observations_once_have_no_sb3_arrays_but_take_dones_writes():
    obs_space, act_space = spaces("box")
    buf = recollect.sb3.ReplayBuffer(
        8, obs_space, act_space, "cpu", 1, optimize_memory_usage=True, rng=0
    )
    with pytest.raises(AttributeError, match="stores each observation once"):
        _ = buf.observations
    buf.dones[0] = True  # what SB3's _setup_learn writes: accepted
    with pytest.raises(InvalidArgumentError, match="keep no `dones` array"):
        _ = buf.dones[0]


def test_sb3_arrays_cannot_be_replaced_only_written_into():
    obs_space, act_space = spaces("box")
    buf = recollect.sb3.ReplayBuffer(8, obs_space, act_space, "cpu", 1, rng=0)
    view = buf.rewards
    with pytest.raises(AttributeError, match="`rewards` of ReplayBuffer is a view of its storage"):
        buf.rewards = np.zeros_like(view)
    buf.rewards[3] = 2.5
    assert view[3, 0] == 2.5 and buf.rewards[3, 0] == 2.5
    assert isinstance(type(buf).observations.__doc__, str)


def test_variants_check_their_spaces_as_sb3():
    obs_space, act_space = spaces("box")
    with pytest.raises(InvalidArgumentError, match="Dict observation space"):
        recollect.sb3.DictReplayBuffer(8, obs_space, act_space)
    assert recollect.sb3.NStepReplayBuffer(8, obs_space, act_space).n_steps == 3


@pytest.mark.parametrize("handle_timeouts", [True, False])
def test_pickle_and_checkpoint_keep_arrays_and_adds_go_on(tmp_path, handle_timeouts):
    import pickle

    kwargs = {"handle_timeout_termination": handle_timeouts}
    sb3, ours, obs_space, act_space = pair("box", 2, size=10, **kwargs)
    feed(sb3, ours, obs_space, act_space, 2, 7)
    ours.save_checkpoint(tmp_path / "ckpt")
    copies = [
        pickle.loads(pickle.dumps(ours)),
        type(ours).load_checkpoint(tmp_path / "ckpt", obs_space, act_space, "cpu"),
    ]
    feed(sb3, ours, obs_space, act_space, 2, 4, seed=9)
    for copy in copies:
        assert copy.sb3_layout
        feed(
            sb3.__class__(10, obs_space, act_space, "cpu", 2, **kwargs),
            copy,
            obs_space,
            act_space,
            2,
            4,
            seed=9,
        )
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(copy, name), getattr(ours, name), name)
        assert (copy.pos, copy.full) == (ours.pos, ours.full)


def test_get_samples_of_a_buffer_storing_observations_once_equal_sb3s():
    """``optimize_memory_usage``: recollect's TransitionBuffer layout, SB3's ``_get_samples``."""
    obs_space, act_space = spaces("box")
    kwargs = {"optimize_memory_usage": True, "handle_timeout_termination": False}
    sb3 = sb3_buffers.ReplayBuffer(8, obs_space, act_space, "cpu", 2, **kwargs)
    ours = recollect.sb3.ReplayBuffer(8, obs_space, act_space, "cpu", 2, rng=0, **kwargs)
    assert not ours.sb3_layout
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((2, 3, 2)).astype(np.float32)
    for _ in range(11):  # a chained stream: each obs is the previous next_obs
        nxt = rng.standard_normal((2, 3, 2)).astype(np.float32)
        args = (obs, nxt, rng.uniform(-1, 1, (2, 2)), np.ones(2, np.float32), np.zeros(2), [])
        sb3.add(*args)
        ours.add(*args)
        obs = nxt
    batch_inds = np.array([s for s in range(4) if s != sb3.pos] * 3)  # SB3 never samples pos
    seed_global(3)
    want = sb3._get_samples(batch_inds)
    seed_global(3)
    assert_same_samples(want, ours._get_samples(batch_inds))
