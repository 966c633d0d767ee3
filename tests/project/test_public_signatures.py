"""The public API's signatures against a committed snapshot (``public_api.txt``).

Every change of a public signature is deliberate: it updates the snapshot and adds a line
to CHANGELOG.md in the same commit. Regenerate the snapshot with::

    RECOLLECT_UPDATE_API=1 python -m pytest tests/project/test_public_signatures.py

The snapshot covers every name in ``__all__`` of the modules below: functions and classes
with their constructor, public methods (signatures), properties and class attributes.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).with_name("public_api.txt")
MODULES = [
    "recollect",
    "recollect.errors",
    "recollect.service",
    "recollect.storage",
    "recollect.samplers",
    "recollect.tf_agents",
    "recollect.sb3",
    "recollect.torch",
    "recollect.jax",
    "recollect.tf_data",
    "recollect.grpc",
]
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(?)"
    return _ADDRESS.sub("", text)


def _describe_class(qualname: str, cls: type) -> list[str]:
    lines = [f"class {qualname}{_signature(cls)}"]
    for name in sorted(dir(cls)):
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if name.startswith("_") or owner is None or not owner.__module__.startswith("recollect"):
            continue  # private, or inherited from Python or a peer's base class
        member = vars(owner)[name]
        if isinstance(member, property):
            lines.append(f"  {qualname}.{name}: property")
        elif isinstance(member, staticmethod | classmethod):
            lines.append(f"  {qualname}.{name}{_signature(member.__func__)}")
        elif inspect.isfunction(member):
            lines.append(f"  {qualname}.{name}{_signature(member)}")
        elif not inspect.isclass(member):
            lines.append(f"  {qualname}.{name}: attribute")
    return lines


def public_api() -> list[str]:
    lines: list[str] = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(getattr(module, "__all__", [])):
            obj = getattr(module, name)
            qualname = f"{module_name}.{name}"
            if inspect.isclass(obj):
                lines += _describe_class(qualname, obj)
            elif callable(obj):
                lines.append(f"def {qualname}{_signature(obj)}")
            elif inspect.ismodule(obj):
                lines.append(f"module {qualname}")
            else:
                lines.append(f"{qualname}: {type(obj).__name__}")
    return lines


def test_public_signatures_match_the_snapshot():
    for module in MODULES:
        if module != "recollect":
            pytest.importorskip(module)
    current = public_api()
    if os.environ.get("RECOLLECT_UPDATE_API"):
        SNAPSHOT.write_text("\n".join(current) + "\n", encoding="utf-8")
    saved = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    removed = sorted(set(saved) - set(current))
    added = sorted(set(current) - set(saved))
    assert not removed and not added, (
        "the public API changed. Removed or changed:\n  "
        + "\n  ".join(removed)
        + "\nAdded or changed:\n  "
        + "\n  ".join(added)
        + "\nIf this is deliberate: add a line to CHANGELOG.md (Unreleased) saying what "
        "changed, then regenerate the snapshot with RECOLLECT_UPDATE_API=1 python -m "
        "pytest tests/project/test_public_signatures.py"
    )


def test_the_snapshot_check_sees_a_changed_signature():
    def before(a, b=1): ...

    def after(a, *, b=1): ...

    assert _signature(before) != _signature(after)
