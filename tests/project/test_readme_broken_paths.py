"""The paths a new user found broken (issue #28, item 3) now work or say what to do."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError, RateLimiterTimeout

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_rate_limiter_hint_counts_the_windows_min_size_to_sample_still_needs():
    spec = {"x": rc.ArraySpec((), np.float32)}
    limiter = rc.SampleToInsertRatio(4.0, 10_000, 40_000.0)
    buf = rc.ReplayBuffer(spec, capacity=100_000, num_envs=8, rate_limiter=limiter)
    buf.add_batch({"x": np.zeros(8, np.float32)})
    with pytest.raises(RateLimiterTimeout, match=r"insert about 9992 more step\(s\)"):
        buf.sample(256, timeout=0)


def _hinted_steps(err: pytest.ExceptionInfo) -> int:
    return int(str(err.value).split("insert about ")[1].split(" ")[0])


@pytest.mark.parametrize(
    ("limiter", "fill", "batch"),
    [
        (rc.SampleToInsertRatio(4.0, 100, 40.0), 3, 8),  # short of min_size_to_sample
        (rc.SampleToInsertRatio(0.5, 4, 10.0), 20, 8),  # short of sample credit
    ],
)
def test_inserting_the_hinted_steps_unblocks_the_sample(limiter, fill, batch):
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, capacity=1000, num_envs=1,
                          rate_limiter=limiter)  # fmt: skip
    step = {"x": np.zeros(1, np.float32)}
    for _ in range(fill):
        buf.add_batch(step, timeout=0)
    while True:  # drain the credit the fill gave
        try:
            buf.sample(batch, timeout=0)
        except RateLimiterTimeout as err:
            hinted = _hinted_steps(pytest.ExceptionInfo.from_exception(err))
            break
    assert hinted > 0
    for _ in range(hinted - 1):
        buf.add_batch(step, timeout=0)
    with pytest.raises(RateLimiterTimeout):
        buf.sample(batch, timeout=0)  # one step fewer than the hint is not enough
    buf.add_batch(step, timeout=0)
    assert buf.sample(batch, timeout=0).ids.shape == (batch,)


def test_checkpoint_without_a_directory_says_what_to_pass():
    from recollect.service import Server

    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, capacity=64, num_envs=1)
    client = Server({"replay": buf}).client()
    try:
        with pytest.raises(InvalidArgumentError, match=r'client\.checkpoint\("ckpt/replay"\)'):
            client.checkpoint()
        with pytest.raises(InvalidArgumentError, match=r'checkpoint_dir="ckpt/replay"'):
            client.checkpoint()
    finally:
        client.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", ["explicit", "auto"])
def test_serve_detach_fails_within_seconds_when_no_cluster_answers(tmp_path, address):
    pytest.importorskip("ray")
    pytest.importorskip("click")
    config = tmp_path / "tables.toml"
    config.write_text(
        "[tables.replay]\ncapacity = 64\nnum_envs = 1\n"
        '[tables.replay.spec]\nx = { shape = [], dtype = "float32" }\n'
    )
    dead = f"127.0.0.1:{_closed_port()}"  # an old cluster's address: nothing listens there
    flag = dead if address == "explicit" else "auto"
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "recollect", "serve", "--config", str(config),
         "--ray-address", flag, "--detach"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "RAY_ADDRESS": dead},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "no Ray cluster answers at 127.0.0.1:" in result.stderr
    assert "ray start --head" in result.stderr
    assert time.monotonic() - start < 30  # the old code retried for minutes


def test_example_config_ships_in_the_package_and_serve_prints_it():
    pytest.importorskip("click")
    from importlib.resources import files

    from recollect.cli.table_config import load_service_config

    packaged = files("recollect.cli").joinpath("tables.toml")
    assert packaged.is_file() and not (ROOT / "examples" / "tables.toml").exists()
    config = load_service_config(Path(str(packaged)))
    assert set(config.tables) == {"replay", "frames"}
    printed = _python("from recollect.__main__ import run; run()", "serve", "--example-config")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == packaged.read_text(encoding="utf-8")
    assert tomllib.loads(printed.stdout)["service"]["name"] == "apex"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "cli/tables.toml" in pyproject["tool"]["setuptools"]["package-data"]["recollect"]
    help_text = _python("from recollect.__main__ import run; run()", "serve", "--help").stdout
    assert "--example-config" in help_text and "examples/tables.toml" not in help_text


BLOCK = "import sys; sys.modules[{missing!r}] = None\n"


@pytest.mark.parametrize(
    ("missing", "code", "extra"),
    [
        ("torch", "import recollect as rc; rc.torch", "torch"),
        ("torch", "import recollect.torch", "torch"),
        ("jax", "import recollect.jax", "jax"),
        ("tensorflow", "import recollect as rc; rc.tf_data", "tf"),
        ("tensorflow", "import recollect as rc; rc.tf_agents", "tf"),
        ("tensorflow", "import recollect.tf_data", "tf"),
        ("tensorflow", "import recollect.tf_agents", "tf"),
        ("ray", "import recollect as rc; rc.ray", "ray"),
    ],
)
def test_a_missing_framework_names_the_extra_to_install(missing, code, extra):
    result = _python(BLOCK.format(missing=missing) + code)
    assert result.returncode == 1
    assert "MissingExtraError" in result.stderr, result.stderr[-2000:]
    assert f'pip install "recollect[{extra}]"' in result.stderr


def test_the_command_without_click_says_to_install_the_cli_extra():
    result = _python(BLOCK.format(missing="click") + "from recollect.__main__ import run; run()")
    assert result.returncode == 1
    assert 'pip install "recollect[cli]"' in result.stderr
    assert "Traceback" not in result.stderr


def test_a_subcommand_without_its_framework_names_the_extra(tmp_path):
    pytest.importorskip("click")
    code = BLOCK.format(missing="torch") + "from recollect.__main__ import run; run()"
    result = _python(code, "demo", "--steps", "8", "--out", str(tmp_path))
    assert result.returncode == 1
    assert "recollect demo needs torch" in result.stderr
    assert 'pip install "recollect[torch]"' in result.stderr
    assert "Traceback" not in result.stderr


def test_the_console_script_is_the_one_that_reports_missing_extras():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["recollect"] == "recollect.__main__:run"
