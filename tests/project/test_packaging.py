"""Release packaging (issue #28, item 4): sdist and wheel build cleanly, carry the license,
the version and the package data, pass twine check, and a wheel installed with numpy and
optree only samples; ruff (the pinned version) passes on the sources."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import recollect

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LINTED = ["src", "tests", "benchmarks"]


def _needs(module: str) -> None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # a namespace package (a build/ folder) is not it
        pytest.skip(f"needs {module}: pip install -c constraints.txt -e '.[test]'")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist and wheel of this checkout (the wheel built from the sdist, as `build` does)."""
    _needs("build")
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300, cwd=out,
    )  # fmt: skip
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' scratch folder
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert not re.search(r"deprecat|SetuptoolsWarning|license.*(table|classifier)", log, re.I), log[
        -3000:
    ]
    return out


def test_license_is_apache_2_in_spdx_metadata():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])


def test_one_version_source():
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "recollect.version.__version__"}
    assert recollect.__version__ == recollect.version.__version__


def test_classifiers_name_the_python_versions_nox_tests():
    classifiers = PYPROJECT["project"]["classifiers"]
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert '["3.11", "3.12", "3.13"]' in noxfile


def test_changelog_keeps_a_changelog_with_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog") and "keepachangelog.com" in text
    assert re.search(r"^## Unreleased$", text, re.M)
    assert f"## {recollect.__version__} - " in text


def test_sdist_and_wheel_carry_license_version_and_package_data(dist):
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    version = recollect.__version__
    assert wheel.name == f"recollect-{version}-py3-none-any.whl"
    assert sdist.name == f"recollect-{version}.tar.gz"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(f"recollect-{version}.dist-info/METADATA").decode()
        entry_points = z.read(f"recollect-{version}.dist-info/entry_points.txt").decode()
    assert "recollect/cli/tables.toml" in names and "recollect/py.typed" in names
    assert f"recollect-{version}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert f"Version: {version}" in metadata
    assert "Requires-Python: >=3.11" in metadata
    assert "recollect = recollect.__main__:run" in entry_points


def test_twine_check_passes(dist):
    _needs("twine")
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_wheel_installs_with_numpy_and_optree_only_and_samples(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    freeze = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    installed = {line.split("==")[0].lower() for line in freeze.split()}
    assert installed - {"pip", "setuptools", "typing_extensions", "typing-extensions"} == {
        "numpy", "optree", "recollect"
    }  # fmt: skip
    code = (
        "import sys, numpy as np, recollect as rc\n"
        "spec = {'obs': rc.ArraySpec((3,), np.float32), 'is_last': rc.ArraySpec((), bool)}\n"
        "buf = rc.ReplayBuffer(spec, capacity=64, num_envs=2, rng=0)\n"
        "for t in range(8):\n"
        "    buf.add_batch({'obs': np.full((2, 3), t, np.float32), 'is_last': np.zeros(2, bool)})\n"
        "s = buf.sample(16, num_steps=2)\n"
        "assert s.data['obs'].shape == (16, 2, 3), s\n"
        "assert not any(m in sys.modules for m in ('torch', 'tensorflow', 'jax', 'click'))\n"
        "print(rc.__version__, rc.__file__)\n"
    )
    run = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=env, check=False,
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(recollect.__version__) and str(venv) in run.stdout
    cli = subprocess.run(
        [str(venv / "bin" / "recollect")], capture_output=True, text=True, env=env,
        check=False, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 1 and 'pip install "recollect[cli]"' in cli.stderr


def _ruff() -> list[str]:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    path = shutil.which("ruff")
    if path is None:
        pytest.skip("needs ruff: pip install -c constraints.txt -e '.[test]'")
    return [path]


def test_ruff_is_the_pinned_version():
    pinned = [r for r in PYPROJECT["project"]["optional-dependencies"]["test"] if "ruff" in r]
    assert len(pinned) == 1 and pinned[0].startswith("ruff==")
    version = subprocess.run([*_ruff(), "--version"], capture_output=True, text=True).stdout
    assert version.split()[-1] == pinned[0].split("==")[1], (
        f"ruff {version.strip()} runs, {pinned[0]} is pinned: pip install '{pinned[0]}'"
    )


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes(command):
    result = subprocess.run(
        [*_ruff(), *command, *LINTED], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ci_runs_the_suite_then_the_other_pythons():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "set -euo pipefail" in script
    lines = [line.split("#")[0].strip() for line in script.splitlines()]
    assert 'pip install -c constraints.txt -e ".[test]"' in lines
    assert "python -m pytest" in lines  # on its own line: set -e ends the script with its status
    assert lines.index("python -m pytest") < next(
        i for i, line in enumerate(lines) if "nox --sessions" in line
    )
    assert "for version in 3.12 3.13" in script
    assert 'sessions+=("tf215")' in script  # TF 2.15 + TF-Agents 0.19 when Python 3.11 exists
