"""Importing recollect imports no framework (torch, tensorflow, jax, gymnasium, ray)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "tensorflow", "jax", "gymnasium", "ray")

SCRIPT = f"""
import json, sys
import recollect
import recollect.buffers, recollect.samplers, recollect.specs, recollect.storage
recollect.ReplayBuffer, recollect.TransitionBuffer, recollect.ArraySpec
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
"""


def test_import_recollect_imports_no_framework():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_public_names_are_exported():
    import recollect as rc

    for name in (
        "ArraySpec",
        "ReplayBuffer",
        "TransitionBuffer",
        "spec_from_example",
        "spec_from_space",
        "Sample",
        "BufferInfo",
        "errors",
        "__version__",
    ):
        assert name in rc.__all__ and hasattr(rc, name)
