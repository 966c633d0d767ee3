"""nox sessions: the core test suite on every supported Python (3.11, 3.12, 3.13).

    nox -s core            # all three (interpreters found on PATH or under pyenv)
    nox -s core-3.13       # one

``core`` installs recollect (not editable: what a user gets) with numpy, optree, the
test tools, import-linter and the frameworks that install without CUDA downloads
(gymnasium, click, tqdm, matplotlib, grpcio: so ``recollect.reverb`` and its gRPC
transport are tested on every Python), always through ``constraints.txt``. Test modules
that import a framework the session lacks at module level (torch, TensorFlow, JAX,
Ray, SB3, Minari) are left out and listed; every other test runs, and the session
fails on any failure.

    nox -s tf215           # the pinned TF world: TF 2.15 + TF-Agents 0.19 on Python 3.11

``tf215`` installs what TF-Agents 0.19 pins (tensorflow-cpu 2.15, numpy < 2, Keras 2,
tensorflow-probability 0.23, gym 0.23), recollect with the ``reverb`` extra and the test
tools, checks that dm-reverb is absent, and runs the TensorFlow and TF-Agents side of
the suite (tests/reverb, tests/tf_agents, tests/manager) there.
"""

from __future__ import annotations

import glob
import os

import nox

PYTHONS = ["3.11", "3.12", "3.13"]
CORE_DEPS = [
    "pytest>=8",
    "pytest-timeout>=2.2",
    "hypothesis>=6.100",
    "scipy>=1.11",
    "gymnasium>=1.0",
    "click>=8.1",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    "import-linter>=2.1",
    "zstandard>=0.22",  # the compression extra: light wheels, no framework
    "cffi>=1.17",
    "lz4>=4.3",
    "grpcio>=1.60",  # the reverb extra: recollect.reverb across processes (recollect.grpc)
    "protobuf>=4.21",  # and reading dm-reverb checkpoints (recollect.state.reverb)
]

#: TF-Agents 0.19's world (it pins TensorFlow ~= 2.15, which has no wheel past Python 3.11)
TF215_PYTHON = "3.11"
TF215_DEPS = [
    "tensorflow-cpu==2.15.*",
    "tf-agents==0.19.0",  # pulls tensorflow-probability 0.23, gym 0.23, numpy 1.26
    "pytest>=8",
    "pytest-timeout>=2.2",
    "hypothesis>=6.100",
    "scipy>=1.11",
]
TF215_TESTS = ["tests/reverb", "tests/tf_agents", "tests/manager"]

nox.options.sessions = ["core"]
nox.options.reuse_existing_virtualenvs = True


def _add_pyenv_interpreters() -> None:
    """Puts pyenv's X.Y interpreters on PATH (nox looks for ``pythonX.Y`` there)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for version in sorted({*PYTHONS, TF215_PYTHON}):
        dirs = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin")))
        found += dirs[-1:]
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_add_pyenv_interpreters()

#: lists the test modules whose module-level imports the session's interpreter lacks
_UNAVAILABLE = r"""
import ast, importlib.util, pathlib, sys
sys.path[:0] = ["tests", "tests/golden", "benchmarks"]  # the suite's helper modules
ADAPTERS = {"recollect.torch": "torch", "recollect.jax": "jax", "recollect.tf_data": "tensorflow",
            "recollect.tf_agents": "tensorflow", "recollect.adapters.tf_data.eager": "tensorflow",
            "recollect.sb3": "stable_baselines3", "recollect.ray": "ray",
            "recollect.datasets.minari": "minari", "recollect.datasets.rlds": "tensorflow",
            "recollect.cli": "click", "recollect.examples": "torch",
            "recollect.grpc": "grpc"}
def needs(name):
    for prefix, module in ADAPTERS.items():
        if name == prefix or name.startswith(prefix + "."):
            return module
    return name.split(".")[0]
def installed(name):
    # a test folder named like a framework (tests/reverb/) is a namespace package on this
    # path, not the framework: only a spec with a file counts
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None
TESTS = sorted(pathlib.Path("tests").rglob("test_*.py"))
sys.path[:0] = sorted({str(p.parent) for p in TESTS})  # pytest puts each test's folder there
for path in TESTS:
    for node in ast.parse(path.read_text()).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
            else [])
        missing = [needs(n) for n in names if not installed(needs(n))]
        if missing:
            print(path, missing[0])
            break
"""


@nox.session(python=PYTHONS)
def core(session: nox.Session) -> None:
    """numpy + optree core tests (and those of the frameworks above) on one Python."""
    session.install("-c", "constraints.txt", ".", *CORE_DEPS)
    left_out = session.run("python", "-c", _UNAVAILABLE, silent=True) or ""
    ignores = []
    for line in left_out.split("\n"):
        if line.strip():
            path, module = line.split()
            session.log(f"left out {path}: needs {module}")
            ignores.append(f"--ignore={path}")
    # the installed package, not the checkout's src/, is what runs
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *ignores, *session.posargs,
        # the slow tests (Ray, training runs, docs pages that need frameworks) ran in the main
        # suite; here the core tests run on each Python
        env={
            "PYTHONPATH": "",
            "CI": "",
            "RECOLLECT_NO_NETNS": os.environ.get("RECOLLECT_NO_NETNS", ""),
        },
    )  # fmt: skip


#: fails when dm-reverb is importable (the session tests recollect.reverb in its place)
_NO_DM_REVERB = """
import importlib.util, sys
spec = importlib.util.find_spec("reverb")
if spec is not None and spec.origin is not None:
    sys.exit(f"dm-reverb is installed ({spec.origin}): tf215 tests recollect.reverb without it")
"""


@nox.session(python=TF215_PYTHON)
def tf215(session: nox.Session) -> None:
    """tests/reverb, tests/tf_agents and tests/manager on TF 2.15 + TF-Agents 0.19 (no
    dm-reverb): the versions TF-Agents' last release pins."""
    session.install("-c", "constraints.txt", ".[reverb]", *TF215_DEPS)
    session.run("python", "-c", _NO_DM_REVERB)
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *TF215_TESTS, *session.posargs,
        env={
            "PYTHONPATH": "",
            "CI": "",  # the slow tests ran in the main suite (TF 2.21)
            "RECOLLECT_NO_NETNS": os.environ.get("RECOLLECT_NO_NETNS", ""),
        },
    )  # fmt: skip
