"""`recollect demo` end to end, and the pieces of the Double DQN example it runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")
pytest.importorskip("matplotlib")

import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import recollect  # noqa: E402
from recollect.cli import main  # noqa: E402
from recollect.cli.demo import buffer_summary  # noqa: E402
from recollect.examples import dqn  # noqa: E402

CARTPOLE_X, CARTPOLE_THETA = 2.4, 12 * 2 * np.pi / 360


def _check_outputs(out: Path, steps: int) -> dict:
    for name in ("learning_curve.png", "metrics.csv", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == steps
    assert summary["buffer"]["steps_stored"] == steps
    assert summary["buffer"]["episodes"] > 0
    assert summary["evaluation"]["episodes"] == 20
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert header == "kind,env_steps,episode,return,length"
    return summary


def test_demo_short_run_writes_curve_metrics_and_buffer_summary(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["demo", "--steps", "3000", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    _check_outputs(out, 3000)
    assert "replay buffer: 3,000 steps stored" in result.output
    assert "evaluation: mean return" in result.output


@pytest.mark.slow  # ~6 s (a child process importing torch); CI and --run-slow
def test_demo_console_script_runs(tmp_path):
    script = shutil.which("recollect")
    if script is None:
        pytest.skip("console script `recollect` not installed (pip install -e .)")
    out = tmp_path / "run"
    args = [script, "demo", "--steps", "2000", "--num-envs", "2", "--capacity", "1000"]
    proc = subprocess.run([*args, "--quiet", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 2000
    assert summary["buffer"]["steps_stored"] == 1000  # the ring kept the newest 1000
    assert (out / "learning_curve.png").stat().st_size > 0


def test_python_m_recollect_demo_help():
    proc = subprocess.run(
        [sys.executable, "-m", "recollect", "demo", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for option in ("--env", "--steps", "--num-envs", "--batch-size", "--capacity", "--seed",
                   "--device", "--out", "--quiet"):  # fmt: skip
        assert option in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "NoSuchEnv-v0"], r"Error: unknown environment id 'NoSuchEnv-v0'"),
        (
            ["--env", "Pendulum-v1"],
            r"Error: Pendulum-v1 has a Box action space .* needs a Discrete",
        ),
        (["--capacity", "1001"], r"Error: `capacity` must be a positive multiple of `num_envs`"),
        (["--device", "nodevice"], r"Error: Invalid value for --device: .*nodevice"),
    ],
)
def test_demo_bad_arguments_give_one_line_error(tmp_path, args, message):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["demo", "--steps", "8", "--quiet", "--out", str(out), *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "Error" in line]
    assert len(errors) == 1
    assert re.search(message, result.output), result.output
    assert not out.exists()


def test_demo_unknown_env_from_console_script_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "recollect", "demo", "--env", "NoSuchEnv-v0", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert proc.stderr.startswith("Error: unknown environment id 'NoSuchEnv-v0'")


# -- the RLDS steps the driver writes ----------------------------------------------------


def _collect(env, vector_steps: int, seed: int = 0):
    buffer = recollect.ReplayBuffer(dqn.rlds_spec(env), 4 * vector_steps, env.num_envs, rng=seed)
    stats = dqn.EpisodeStats(env.num_envs)
    driver = dqn.Driver(env, [buffer.add_batch, stats], seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(vector_steps):
        driver.step(rng.integers(0, 2, env.num_envs))
    return buffer, stats


def test_driver_writes_rlds_episodes_with_final_observation_steps():
    buffer, stats = _collect(dqn.make_env("CartPole-v1", 3), 300)
    d = buffer.gather_all()  # leaves [3, 300]
    first, last, terminal = d["is_first"], d["is_last"], d["is_terminal"]
    assert first[:, 0].all() and not last[:, 0].any()
    np.testing.assert_array_equal(first[:, 1:], last[:, :-1])  # a final step, then a new episode
    np.testing.assert_array_equal(terminal, last)  # random play never reaches 500 steps
    assert (d["reward"][last] == 0).all() and (d["reward"][~last] == 1).all()
    # the step before a terminal final step carries discount 0, every other step 1
    np.testing.assert_array_equal(d["discount"][:, :-1] == 0, terminal[:, 1:])
    obs = d["observation"]
    final, reset = obs[last], obs[first]
    assert ((np.abs(final[:, 0]) > CARTPOLE_X) | (np.abs(final[:, 2]) > CARTPOLE_THETA)).all()
    assert (np.abs(reset) <= 0.05).all()  # CartPole resets uniformly in [-0.05, 0.05]
    assert len(stats.episodes) == last.sum()
    finished = np.flip(np.cumsum(np.flip(last, 1), 1), 1) > 0  # up to each row's last is_last
    assert sum(r for _, r, _ in stats.episodes) == d["reward"][finished].sum()


def test_windows_of_two_never_pair_a_final_observation_with_the_reset_observation():
    buffer, _ = _collect(dqn.make_env("CartPole-v1", 4), 250)
    s = buffer.sample(4096, num_steps=2).data
    assert not s["is_last"][:, 0].any()
    assert not s["is_first"][:, 1].any()
    np.testing.assert_array_equal(s["discount"][:, 0] == 0, s["is_terminal"][:, 1])


def test_truncated_episodes_end_with_is_last_but_not_is_terminal():
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=5)
    buffer, stats = _collect(env, 60)
    d = buffer.gather_all()
    last = d["is_last"]
    assert last.any() and not d["is_terminal"].any()
    assert (d["discount"] == 1).all()  # truncation bootstraps
    assert {length for _, _, length in stats.episodes} == {5}
    assert last[:, 5::6].all()  # 5 steps, then the final observation step


# -- loss and summary against plain references --------------------------------------------


def test_double_dqn_loss_matches_a_plain_reference():
    torch.manual_seed(0)
    q, target = dqn.q_network(3, 2, 8), dqn.q_network(3, 2, 8)
    rng = np.random.default_rng(0)
    batch = {
        "observation": rng.normal(size=(5, 2, 3)).astype(np.float32),
        "action": rng.integers(0, 2, (5, 2)),
        "reward": rng.normal(size=(5, 2)).astype(np.float32),
        "discount": np.array([[1, 1], [0, 1], [1, 1], [0, 1], [1, 1]], np.float32),
    }
    loss = dqn.double_dqn_loss(q, target, recollect.torch.as_tensors(batch), 0.9)
    with torch.no_grad():
        expected = []
        for i in range(5):
            o, o2 = (torch.from_numpy(batch["observation"][i, k]) for k in (0, 1))
            a2 = int(q(o2).argmax())
            y = batch["reward"][i, 0] + 0.9 * batch["discount"][i, 0] * float(target(o2)[a2])
            err = abs(float(q(o)[batch["action"][i, 0]]) - y)
            expected.append(0.5 * err**2 if err < 1 else err - 0.5)
    assert loss.item() == pytest.approx(np.mean(expected), rel=1e-5)


def test_buffer_summary_counts_only_complete_episodes():
    spec = dqn.rlds_spec(dqn.make_env("CartPole-v1", 1))
    buffer = recollect.ReplayBuffer(spec, capacity=8, num_envs=1)
    rewards = [1, 1, 0, 2, 2, 2, 0, 3, 3, 3, 3]  # a final step after each episode
    lasts = [0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    firsts = [1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
    for r, la, fi in zip(rewards, lasts, firsts, strict=True):
        step = {"observation": np.zeros(4, np.float32), "action": np.int64(0)}
        step.update(reward=np.float32(r), discount=np.float32(1), is_first=bool(fi))
        buffer.add({**step, "is_last": bool(la), "is_terminal": bool(la)})
    summary = buffer_summary(buffer)  # stored: steps 3..10: [2,2,2,0 | 3,3,3,3]
    assert summary == {"steps_stored": 8, "capacity": 8, "num_envs": 1, "episodes": 1,
                       "mean_return": 6.0}  # fmt: skip


@pytest.mark.slow
def test_demo_defaults_solve_cartpole(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["demo", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"]["mean_return"] >= 475
