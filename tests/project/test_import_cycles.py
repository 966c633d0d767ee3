"""The package has no import cycles beyond an explicit allow-list that must shrink (issue 27).

A cycle is a strongly connected component of the module import graph (grimp, the graph
import-linter uses; imports under ``TYPE_CHECKING`` count too). Every component of more
than one module must lie inside one entry of ``ALLOWED_CYCLES``.
"""

from __future__ import annotations

import sys

import pytest

grimp = pytest.importorskip("grimp")

# Known cycles, each with its owner. Remove an entry when its cycle is broken; this set
# must shrink to empty (never add to it: break the new cycle instead).
ALLOWED_CYCLES: set[frozenset[str]] = set()


def import_cycles(package: str) -> list[frozenset[str]]:
    """The strongly connected components (Tarjan) of more than one module."""
    graph = grimp.build_graph(package)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges)))
    try:
        for module in sorted(edges):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycles_outside_the_allow_list():
    new = [
        sorted(cycle)
        for cycle in import_cycles("recollect")
        if not any(cycle <= allowed for allowed in ALLOWED_CYCLES)
    ]
    assert new == [], f"import cycles not in ALLOWED_CYCLES (break them): {new}"


def test_cycle_finder_sees_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg_i27"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg_i27 import b\n")
    (pkg / "b.py").write_text("from cyclepkg_i27 import a\n")
    (pkg / "c.py").write_text("from cyclepkg_i27 import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclepkg_i27") == [frozenset({"cyclepkg_i27.a", "cyclepkg_i27.b"})]
