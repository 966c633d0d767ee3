"""The house's shape checks (issue 37): classes compose collaborators instead of mixins,
and a module over 500 lines says why.

- A *mixin* here is a project class that declares attributes at class level without a
  value (``_levels: list[np.ndarray]``: it expects a host to define them) and is a base of
  another project class. Dataclasses, NamedTuples, TypedDicts and Protocols declare fields
  or contracts, not host attributes, and are not counted.
- ``if TYPE_CHECKING:`` blocks inside a class body (stubs of methods defined elsewhere) and
  ``name: Any = self`` aliases are the same smell.
- ``PENDING_MIXINS`` lists the mixins still being turned into collaborators: it may only
  shrink (an entry that is no longer a mixin fails the test, so it is taken out).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import recollect

PACKAGE = Path(recollect.__file__).parent
LIMIT = 500
#: modules over LIMIT lines, each with the reason it stays one module
ALLOWED_LARGE: dict[str, str] = {}
#: mixins still to be made collaborators (shrink only)
PENDING_MIXINS: set[str] = set()
#: classes still aliasing ``self`` to reach their host's members (shrink only)
PENDING_SELF_ALIASES: set[str] = set()
_FIELD_BASES = {"NamedTuple", "TypedDict", "Protocol", "Generic", "Enum", "IntEnum"}


@dataclass
class _Class:
    path: str
    node: ast.ClassDef

    @property
    def bases(self) -> list[str]:
        names = []
        for base in self.node.bases:
            if isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                names.append(base.id)
            elif isinstance(base, ast.Attribute):
                names.append(base.attr)
        return names

    @property
    def declares_fields(self) -> bool:
        decorated = any(
            "dataclass" in ast.unparse(d) or "total_ordering" in ast.unparse(d)
            for d in self.node.decorator_list
        )
        return decorated or bool(_FIELD_BASES & set(self.bases))

    @property
    def valueless(self) -> list[str]:
        return [
            s.target.id
            for s in self.node.body
            if isinstance(s, ast.AnnAssign) and s.value is None and isinstance(s.target, ast.Name)
        ]


def _modules() -> dict[str, ast.Module]:
    return {
        p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def _classes() -> list[_Class]:
    return [
        _Class(path, node)
        for path, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    ]


def _mixins() -> dict[str, list[str]]:
    """``{mixin name: [its valueless class attributes]}``."""
    classes = _classes()
    by_name: dict[str, list[_Class]] = {}
    for c in classes:
        by_name.setdefault(c.node.name, []).append(c)
    found: dict[str, list[str]] = {}
    for c in classes:
        for base in c.bases:
            for b in by_name.get(base, []):
                if not b.declares_fields and b.valueless:
                    found[b.node.name] = b.valueless
    return found


def test_no_class_re_declares_its_hosts_attributes():
    mixins = _mixins()
    new = {name: attrs for name, attrs in mixins.items() if name not in PENDING_MIXINS}
    assert new == {}, (
        f"mixin classes that declare their host's attributes: {new}. Make each a "
        "collaborator the host holds (constructed with what it needs), not a base."
    )
    gone = PENDING_MIXINS - set(mixins)
    assert not gone, f"no longer mixins: take {sorted(gone)} out of PENDING_MIXINS."


def test_no_type_checking_stubs_or_self_aliases_in_class_bodies():
    found = []
    for c in _classes():
        if c.declares_fields:  # a dataclass may type its generated __init__ this way
            continue
        for stmt in c.node.body:
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                found.append(f"{c.path}:{c.node.name} (if TYPE_CHECKING)")
        for node in ast.walk(c.node):
            if (
                isinstance(node, ast.AnnAssign | ast.Assign)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                found.append(f"{c.path}:{c.node.name}:{node.lineno} (alias of self)")
    pending = PENDING_MIXINS | PENDING_SELF_ALIASES
    named = {f.split(":")[1].split(" ")[0] for f in found}
    found = [f for f in found if f.split(":")[1].split(" ")[0] not in pending]
    assert found == [], f"stubs of methods defined elsewhere or aliases of self: {found}"
    gone = PENDING_SELF_ALIASES - named
    assert not gone, f"no longer alias self: take {sorted(gone)} out of PENDING_SELF_ALIASES."


def test_modules_over_500_lines_state_why():
    sizes = {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    over = {name: n for name, n in sizes.items() if n > LIMIT and name not in ALLOWED_LARGE}
    assert over == {}, (
        f"modules over {LIMIT} lines: {over}. Split them by responsibility, or add the module "
        "to ALLOWED_LARGE with the reason it is one module."
    )
    stale = {name for name in ALLOWED_LARGE if sizes.get(name, 0) <= LIMIT}
    assert not stale, f"no longer over {LIMIT} lines: take {sorted(stale)} out of ALLOWED_LARGE."
    assert all(len(reason) > 20 for reason in ALLOWED_LARGE.values())


def test_the_mixin_check_finds_a_mixin():
    source = (
        "class Part:\n    _levels: list\n    def f(self): return self._levels\n"
        "class Host(Part):\n    def __init__(self): self._levels = []\n"
    )
    tree = ast.parse(source)
    parts = [_Class("x.py", n) for n in tree.body if isinstance(n, ast.ClassDef)]
    assert parts[0].valueless == ["_levels"] and not parts[0].declares_fields
    assert parts[1].bases == ["Part"]
