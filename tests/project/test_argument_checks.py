"""Argument checks go through one helper, :mod:`recollect.arguments` (issue 27).

A hand-written int check (``isinstance(x, int ...)`` beside a bool exclusion, or an
``if x < 1: raise``) or a copied "takes no options" check (``if kwargs: raise``) outside
that module is an error, except in the files of ``PENDING``: an explicit allow-list of
the checks not converted yet, which must shrink (never add to it: call
``recollect.arguments.positive_int``, ``check_int``, ``is_int`` or ``no_options``).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import recollect

PACKAGE = Path(recollect.__file__).parent
HELPER = "arguments.py"

# file (relative to the package) -> hand-written checks left in it; shrink only.
PENDING: dict[str, int] = {}


def _mentions_int(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "int" for n in ast.walk(node))


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, ast.Raise) for s in body)


def _below_one(node: ast.AST) -> bool:
    """``x < 1``: the bound of a hand-written "int >= 1" check."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return False
    right = node.comparators[0]
    return (
        isinstance(node.ops[0], ast.Lt)
        and isinstance(right, ast.Constant)
        and type(right.value) is int
        and right.value == 1
    )


def hand_written_checks(source: str) -> list[str]:
    """The hand-written argument checks in ``source``, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and _mentions_int(node.args[1])
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.If) and _raises(node.body):
            if isinstance(node.test, ast.Name) and node.test.id in {"kwargs", "options"}:
                found.append(f"{node.lineno}: if {node.test.id}: raise")
            found += [
                f"{node.lineno}: {ast.unparse(c)}" for c in ast.walk(node.test) if _below_one(c)
            ]
    return found


def test_no_hand_written_argument_checks_outside_the_helper():
    counts: Counter[str] = Counter()
    lines: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == HELPER:
            continue
        found = hand_written_checks(path.read_text(encoding="utf-8"))
        if found:
            counts[name] = len(found)
            lines[name] = found
    new = {name: lines[name] for name, count in counts.items() if count > PENDING.get(name, 0)}
    assert new == {}, (
        "hand-written argument checks (use recollect.arguments.positive_int / check_int / "
        f"is_int / no_options instead): {new}"
    )


def test_the_finder_sees_each_pattern():
    source = (
        "def f(n, k, **kwargs):\n"
        "    if isinstance(n, bool) or not isinstance(n, int) or n < 1:\n"
        "        raise ValueError(n)\n"
        "    if k < 1:\n"
        "        raise ValueError(k)\n"
        "    if kwargs:\n"
        "        raise TypeError(kwargs)\n"
        "    return n < 1\n"  # a comparison that raises nothing is no check
    )
    found = sorted(int(line.split(":")[0]) for line in hand_written_checks(source))
    assert found == [2, 2, 4, 6]
