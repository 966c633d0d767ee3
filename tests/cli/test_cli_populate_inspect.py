"""``recollect populate`` -> ``recollect inspect`` -> ``ReplayBuffer.load`` on CartPole."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import recollect as rc
from recollect.cli import main

pytest.importorskip("gymnasium")


def populate(tmp_path, *extra: str):
    args = [
        "populate", "--env", "CartPole-v1", "--buffer-name", "starter", "--capacity", "200",
        "--steps-per-run", "64", "--num-runs", "2", "--checkpoint-dir", str(tmp_path / "ck"),
        "--no-progress", *extra,
    ]  # fmt: skip
    return CliRunner().invoke(main, args)


def test_populate_then_inspect_then_load(tmp_path, monkeypatch):
    result = populate(tmp_path, "--policy", "random", "--num-envs", "2")
    assert result.exit_code == 0, result.output
    assert "130 steps added (the last 2 close the open episodes), 130 stored" in result.output
    path = tmp_path / "ck" / "starter"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    for expected in ("steps        130", "episodes", "return", "observation  (4,)", "float32"):
        assert expected in result.output
    assert (tmp_path / "inspect.png").stat().st_size > 1000
    buffer = rc.ReplayBuffer.load(path)
    assert buffer.num_frames() == 130 and buffer.num_envs == 2
    data = buffer.gather_all()
    final = data["is_last"]
    assert np.all(data["action"][final] == 0) and np.all(data["reward"][final] == 0)
    assert buffer.sample(16, 2).data["observation"].shape == (16, 2, 4)


def test_populate_with_a_module_policy(tmp_path, monkeypatch):
    (tmp_path / "my_policy.py").write_text(
        "import numpy as np\n\ndef always_left(obs):\n    return np.zeros(len(obs), np.int64)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = populate(tmp_path, "--policy", "my_policy:always_left")
    assert result.exit_code == 0, result.output
    buffer = rc.ReplayBuffer.load(tmp_path / "ck" / "starter")
    assert np.all(buffer.gather_all()["action"] == 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["populate", "--env", "NoSuchEnv-v9", "--checkpoint-dir", "x"], "unknown environment"),
        (["populate", "--env", "CartPole-v1", "--policy", "nope", "--checkpoint-dir", "x"],
         "must be 'random' or 'module:callable'"),
        (["populate", "--env", "CartPole-v1", "--policy", "no_module_xyz:f", "--checkpoint-dir",
          "x"], "cannot load policy"),
        (["inspect", "does/not/exist"], "no such checkpoint directory"),
    ],
)  # fmt: skip
def test_bad_input_gives_one_line_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_inspect_of_a_directory_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "plain").mkdir()
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "plain"), "--no-plot"])
    assert result.exit_code == 1
    assert "not a recollect checkpoint" in result.output
