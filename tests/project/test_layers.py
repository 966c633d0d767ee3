"""Architecture checks: the import-linter layer contracts and no reach-ins into private members."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "recollect"

# `obj._name` where obj is not self. Each allowed reach-in names the file and why it is needed.
# (namedtuples' documented API, ``_fields``/``_replace``/``_make``/``_asdict``, is public:
# the underscore only avoids clashes with field names)
PRIVATE = re.compile(r"\b(?!self\b)\w+\._(?!(?:fields|replace|make|asdict)\b)[a-z]")
ALLOWED = {
    # JAX's batched_device_put skips ~12 us of Python per array; probed against
    # jax.device_put when the iterator is built, with the public call as fallback.
    ("adapters/jax.py", "jax._src"),
    # tf.data's OwnedIterator can only be built on the dataset's variant tensor.
    ("adapters/tf_data/eager.py", "dataset._variant_tensor"),
    ("reverb/wrapped_dataset.py", "_inner._variant_tensor"),
    # a script that never stops its reverb.Server must still exit: gRPC's worker threads
    # are joined before atexit runs; only threading's own hook runs before that join.
    ("reverb/server.py", "threading._register_atexit"),
    # in a forked child, whether the forking thread itself holds a table's RLock: only
    # RLock._is_owned says so (a non-blocking acquire cannot tell it from a free lock).
    ("table/at_fork.py", "lock._is_owned"),
    # the alias finder's map names the old private modules (strings, not attribute reach-ins)
    ("__init__.py", "recollect._tf_"),
}


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    exe = shutil.which("lint-imports") or "lint-imports"
    return subprocess.run(
        [exe, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_layers_and_framework_free_core_contracts_hold():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout), result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "message"),
    [
        ("storage/ring.py", "import recollect.buffers", "recollect.storage is not allowed to"),
        ("samplers/windows.py", "import recollect.table", "recollect.samplers is not allowed to"),
        ("table/table.py", "import torch", "recollect.table is not allowed to import torch"),
        (
            "service/client/writer.py",
            "import recollect.service.shard",
            "recollect.service.client is not allowed to",
        ),
        (
            "adapters/prefetch.py",
            "import recollect.adapters.torch",
            "recollect.adapters.prefetch is not allowed to import recollect.adapters.torch",
        ),
        ("adapters/torch.py", "import recollect.adapters.jax", "recollect.adapters.torch is not"),
    ],
)
def test_contracts_fail_on_an_upward_or_framework_import(tmp_path, module, bad_import, message):
    """A copy of the package with one bad import breaks the contracts (src stays untouched)."""
    copy = tmp_path / "src" / "recollect"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text() + f"\n{bad_import}  # deliberately upward\n")
    result = _lint_imports(tmp_path, pythonpath=tmp_path / "src")
    assert result.returncode != 0
    assert message in result.stdout, result.stdout[-2000:]


def test_no_module_reaches_into_another_objects_private_members():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for match in PRIVATE.finditer(line):
                text = line[match.start() :]
                if not any(rel == f and text.startswith(p) for f, p in ALLOWED):
                    found.append(f"{rel}:{lineno}: {line.strip()}")
    assert len(ALLOWED) < 10
    assert not found, "\n".join(found)


def test_importing_recollect_imports_no_framework():
    code = (
        "import sys, recollect, recollect.table, recollect.storage, recollect.checkpoint\n"
        "bad = [m for m in ('torch', 'tensorflow', 'jax', 'ray', 'click') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
