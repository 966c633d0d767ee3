"""``recollect populate`` / ``inspect`` faults found as a new user (issue #14, items 12, 14)."""

from __future__ import annotations

import json
import os
import sys

import click
import numpy as np
import pytest
from click.testing import CliRunner

import recollect as rc
from recollect.cli import main

pytest.importorskip("gymnasium")


def populate(tmp_path, *extra: str):
    args = [
        "populate", "--env", "CartPole-v1", "--buffer-name", "starter", "--capacity", "400",
        "--steps-per-run", "32", "--num-runs", "2", "--checkpoint-dir", str(tmp_path / "ck"),
        "--no-progress", *extra,
    ]  # fmt: skip
    return CliRunner().invoke(main, args)


def test_populate_refuses_an_existing_buffer_without_overwrite_or_append(tmp_path):
    assert populate(tmp_path, "--num-envs", "2").exit_code == 0
    before = rc.ReplayBuffer.load(tmp_path / "ck" / "starter").num_frames()
    result = populate(tmp_path, "--num-envs", "2")
    assert result.exit_code != 0
    assert "already holds a checkpoint" in result.output
    assert "--append" in result.output and "--overwrite" in result.output
    assert rc.ReplayBuffer.load(tmp_path / "ck" / "starter").num_frames() == before


def test_populate_overwrite_replaces_and_append_continues(tmp_path):
    assert populate(tmp_path, "--num-envs", "2").exit_code == 0
    first = rc.ReplayBuffer.load(tmp_path / "ck" / "starter").num_frames()
    result = populate(tmp_path, "--num-envs", "2", "--overwrite")
    assert result.exit_code == 0, result.output
    assert rc.ReplayBuffer.load(tmp_path / "ck" / "starter").num_frames() == first
    result = populate(tmp_path, "--append", "--seed", "1")  # num_envs from the checkpoint
    assert result.exit_code == 0, result.output
    buffer = rc.ReplayBuffer.load(tmp_path / "ck" / "starter")
    assert buffer.num_frames() == 2 * first and buffer.num_envs == 2
    data = buffer.gather_all()
    # Every session closes its open episodes, so an appended episode never joins an old one.
    half = first // 2
    assert np.all(data["is_last"][:, half - 1]) and np.all(data["is_first"][:, half])
    result = populate(tmp_path, "--append", "--overwrite")
    assert result.exit_code != 0 and "not both" in result.output


def test_populate_append_checks_the_checkpoint(tmp_path):
    assert populate(tmp_path, "--num-envs", "2").exit_code == 0
    result = populate(tmp_path, "--append", "--num-envs", "4")
    assert result.exit_code != 0
    assert "has num_envs=2; the manager was given num_envs=4" in result.output
    result = populate(tmp_path, "--append", "--capacity", "800")
    assert "has capacity=400" in result.output


def test_steps_per_run_must_be_a_multiple_of_num_envs(tmp_path):
    result = populate(tmp_path, "--num-envs", "3")
    assert result.exit_code != 0
    assert "--steps-per-run 32 is not a multiple of --num-envs 3" in result.output
    assert "use 30 or 33" in result.output


def test_policy_module_is_found_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd_policy.py").write_text(
        "import numpy as np\n\ndef left(obs):\n    return np.zeros(len(obs), np.int64)\n"
    )
    monkeypatch.chdir(tmp_path)
    # As the installed `recollect` script runs: the current directory is not on sys.path.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", os.getcwd())])
    result = populate(tmp_path, "--policy", "cwd_policy:left")
    assert result.exit_code == 0, result.output
    assert np.all(rc.ReplayBuffer.load(tmp_path / "ck" / "starter").gather_all()["action"] == 0)


def test_every_option_has_help_text():
    missing = [
        f"{name} {param.opts[0]}"
        for name, command in main.commands.items()
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert missing == []


def test_inspect_prints_integer_stats_as_integers(tmp_path):
    assert populate(tmp_path).exit_code == 0
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "ck" / "starter"), "--no-plot"])
    assert result.exit_code == 0, result.output
    length = next(line for line in result.output.splitlines() if line.startswith("length"))
    assert "min" in length and ".00" not in length.split("min", 1)[1], length
    assert "(1 env row)" in result.output


def test_inspect_reads_a_memmap_directory_without_changing_it(tmp_path):
    spec = {
        "observation": rc.ArraySpec((2,), np.float32),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), np.bool_),
    }
    directory = tmp_path / "mm"
    kwargs = {"storage": "memmap", "directory": directory, "sequence_length": 2}
    buf = rc.ReplayBuffer(spec, 40, 2, sampler=rc.Prioritized(), **kwargs)
    for t in range(12):
        buf.add_batch(
            {
                "observation": np.full((2, 2), t, np.float32),
                "action": np.full(2, t % 3),
                "reward": np.ones(2, np.float32),
                "is_last": np.full(2, t % 4 == 3),
            }
        )
    s = buf.sample(4)
    buf.update_priorities(s.ids, np.full(4, 5.0))
    buf.flush()
    manifest = (directory / "manifest.json").read_bytes()
    result = CliRunner().invoke(main, ["inspect", str(directory), "--no-plot"])
    assert result.exit_code == 0, result.output
    for expected in ("kind         memmap ReplayBuffer", "steps        24", "Prioritized",
                     "episodes     4 complete, 2 partial"):  # fmt: skip
        assert expected in result.output, result.output
    assert (directory / "manifest.json").read_bytes() == manifest
    assert json.loads(manifest)["config"]["sampler"]["type"] == "Prioritized"
