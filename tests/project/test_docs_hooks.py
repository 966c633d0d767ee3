"""The documentation's build hooks (docs/hooks/, issue #36 item 4): the docstrings' reST
roles become autorefs links or plain code, and the hidden set-up blocks show collapsed."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "hooks"


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass/typing look-ups need it registered
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def loaded():
    """The recollect package as griffe loads it for the site, and the roles hook."""
    griffe = pytest.importorskip("griffe", reason="needs the docs extra (mkdocstrings)")
    roles = _hook("griffe_roles")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")])
    package = loader.load("recollect")
    return roles, roles.Resolver(loader.modules_collection), package


def _link(path: str, title: str) -> str:
    return f'<autoref identifier="{path}" optional>`{title}`</autoref>'


def test_roles_become_links_with_sphinx_titles(loaded):
    roles, resolver, package = loaded
    buffer = package["ReplayBuffer"].final_target.path  # the defining module's path
    assert buffer.startswith("recollect.") and buffer.endswith(".ReplayBuffer")
    sample = resolver.lookup("recollect.ReplayBuffer.sample").path
    assert sample.startswith("recollect.") and sample.endswith(".sample")
    cases = {
        ":class:`~recollect.ReplayBuffer`": _link(buffer, "ReplayBuffer"),
        ":class:`recollect.ReplayBuffer`": _link(buffer, "recollect.ReplayBuffer"),
        # an inherited method: the path of the class that defines it
        ":meth:`~recollect.ReplayBuffer.sample`": _link(sample, "sample()"),
        ":meth:`Table.draw <recollect.table.Table.draw>`": _link(
            resolver.lookup("recollect.table.Table.draw").path, "Table.draw"
        ),
        # a role broken over two lines, as several docstrings write it
        ":meth:`Table.draw\n    <recollect.table.Table.draw>`": _link(
            resolver.lookup("recollect.table.Table.draw").path, "Table.draw"
        ),
        ":py:func:`~recollect.estimate_memory`": _link(
            "recollect.memory.estimate_memory", "estimate_memory()"
        ),
        ":class:`!recollect.ReplayBuffer`": "`recollect.ReplayBuffer`",  # ! : no link
        ":mod:`multiprocessing.connection`": "`multiprocessing.connection`",  # not ours
        ":class:`NoSuchThing`": "`NoSuchThing`",
        ":ref:`the service <service-label>`": "the service",
    }
    for text, expected in cases.items():
        assert roles.rewrite(f"See {text}.", resolver, package) == f"See {expected}.", text


def test_names_resolve_in_the_scope_of_the_documented_object(loaded):
    roles, resolver, package = loaded
    buffer = package["ReplayBuffer"].final_target
    method = buffer.all_members["sample"]
    # a bare method name in a method's docstring: the class's method
    assert roles.rewrite(":meth:`add_batch`", resolver, method) == _link(
        resolver.lookup(f"{buffer.path}.add_batch").path, "add_batch()"
    )
    # ".name" in a package docstring: its submodule
    cli = package["cli"]
    assert roles.rewrite(":mod:`.group`", resolver, cli) == _link("recollect.cli.group", "group")


def test_no_docstring_keeps_a_role(loaded):
    """What the site shows: every docstring of the package, rewritten, has no role left
    (a role the pattern misses would show as text; the build test checks the HTML)."""
    roles, resolver, package = loaded
    left, rewritten, stack = [], 0, [package]
    while stack:
        obj = stack.pop()
        if obj.docstring is not None:
            text = roles.rewrite(obj.docstring.value, resolver, obj)
            rewritten += text != obj.docstring.value
            left += [f"{obj.path}: {m}" for m in re.findall(r":[a-z:]+:`[^`]*`", text)]
        stack.extend(m for m in obj.members.values() if not m.is_alias)
    assert rewritten > 100 and not left, left[:10]


def test_hidden_set_up_blocks_render_collapsed():
    setup = _hook("setup_blocks")
    page = (
        "# Page\n\n<!-- setup\n```python\nimport numpy as np\n\nspec = 1\n```\n-->\n\n"
        "```python\nx = spec\n```\n\n<!-- setup\n```python\nassert x == 1\n```\n-->\n"
    )
    assert setup.render(page) == (
        '# Page\n\n??? example "Set-up (runs before the examples below)"\n\n'
        "    ```python\n    import numpy as np\n\n    spec = 1\n    ```\n\n"
        "```python\nx = spec\n```\n\n"
        '??? example "Check (runs here)"\n\n    ```python\n    assert x == 1\n    ```\n'
    )
    for path in sorted((ROOT / "docs").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        rendered = setup.render(text)
        assert "<!-- setup\n```python" not in rendered, path
        assert rendered.count("```python\n") == text.count("```python\n"), path


def test_the_docs_extra_installs_a_signature_formatter():
    """mkdocstrings formats signatures with black or ruff; without one, ReplayBuffer's
    signature was one 486-character line (issue #36, item 4)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    docs = project["optional-dependencies"]["docs"]
    assert any(re.match(r"(ruff|black)\b", requirement) for requirement in docs), docs
