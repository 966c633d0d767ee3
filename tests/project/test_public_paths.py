"""The old dotted names of moved modules keep working (issue 37, "folders that state the layers").

``recollect/__init__.py`` maps each old name (``recollect.torch``, ``recollect.windows``,
``recollect.storage.codecs``, ...) to the module it moved to: importing the old name gives
the same module object, lazily, and pickles naming an old path still load.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

import recollect

MOVED = sorted(recollect._MOVED.items())
FRAMEWORKS = ("torch", "tensorflow", "jax", "gymnasium", "ray")
NEEDS = {  # old name -> the framework it imports when loaded
    "recollect.torch": "torch",
    "recollect.jax": "jax",
    "recollect.tf_data": "tensorflow",
    "recollect._tf_eager": "tensorflow",
    "recollect._tf_chunks": "tensorflow",
    "recollect._tf_pass": "tensorflow",
}


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # about 7 s (imports every framework): runs with CI=true / --run-slow
def test_each_old_path_imports_as_the_same_module_object():
    """One interpreter imports every old name (those whose framework is installed)."""
    import importlib.util

    pairs = [
        (old, new)
        for old, new in MOVED
        if old not in NEEDS or importlib.util.find_spec(NEEDS[old]) is not None
    ]
    assert len(pairs) >= len(MOVED) - len(NEEDS)
    code = (
        "import importlib, json, sys\n"
        "out = {}\n"
        f"for old, new in {pairs!r}:\n"
        "    o = importlib.import_module(old)\n"
        "    n = importlib.import_module(new)\n"
        "    parent, _, leaf = old.rpartition('.')\n"
        "    out[old] = [o is n, sys.modules[old] is n, o.__name__, o.__spec__.name,"
        " getattr(sys.modules[parent], leaf) is n]\n"
        "print(json.dumps(out))"
    )
    got = json.loads(_run(code))
    assert got == {old: [True, True, new, new, True] for old, new in pairs}


def test_the_old_names_name_no_module_file_of_their_own():
    """No shim files: the old names exist only in the finder's map."""
    root = __import__("pathlib").Path(recollect.__file__).parent
    for old, new in MOVED:
        rel = old.split(".")[1:]
        assert not root.joinpath(*rel[:-1], rel[-1] + ".py").exists(), old
        assert not root.joinpath(*rel, "__init__.py").exists(), old
        assert (
            root.joinpath(*new.split(".")[1:]).with_suffix(".py").exists()
            or root.joinpath(*new.split(".")[1:], "__init__.py").exists()
        ), new


def test_importing_recollect_alone_imports_no_framework_and_no_moved_module():
    code = (
        "import json, sys, recollect\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}"
        f" or m in {[old for old, _ in MOVED if old in NEEDS]!r})))"
    )
    assert json.loads(_run(code)) == []


def test_attribute_access_loads_the_adapter_module():
    pytest.importorskip("torch")
    code = (
        "import json, recollect as rc, recollect.adapters.torch as t\n"
        "print(json.dumps([rc.torch is t, rc.drivers is __import__('recollect.collect.drivers',"
        " fromlist=['x'])]))"
    )
    assert json.loads(_run(code)) == [True, True]


def test_a_pickle_naming_an_old_path_loads():
    from recollect.samplers.windows import WindowIndex

    data = pickle.dumps(WindowIndex, protocol=2)
    old = data.replace(b"recollect.samplers.windows", b"recollect.windows")
    assert old != data
    code = f"import pickle, sys\ncls = pickle.loads({old!r})\nprint(cls.__module__)"
    assert _run(code) == "recollect.samplers.windows"


def test_an_unknown_name_still_fails_to_import():
    with pytest.raises(ModuleNotFoundError, match=r"recollect\.no_such_module"):
        __import__("recollect.no_such_module")
