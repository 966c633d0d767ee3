"""Griffe extension: render the docstrings' Sphinx roles as links on the site.

The docstrings under ``src/`` cross-reference with reST roles (``:class:`~recollect.X```,
``:meth:`Table.draw <recollect.table.Table.draw>```, ``:mod:`.group```), which Markdown
would show as literal text. Once griffe has loaded the package, this rewrites each role
in every docstring into an mkdocs-autorefs cross-reference:

- the target is resolved the way Sphinx does it: in the scope of the documented object
  (its class, its module, the parent packages, following imports), then as an absolute
  path, then, for ``.name``, as the suffix of exactly one object's path;
- a resolved target becomes ``<autoref identifier="PATH" optional>`title`</autoref>``:
  a link where the object is documented on the site, plain code where it is not (so a
  reference to an undocumented helper never breaks ``mkdocs build --strict``);
- an unresolved target, ``!`` (no link) and ``:ref:`` labels become plain code/text.

Titles follow Sphinx: ``~a.b.c`` shows ``c``; ``Title <target>`` shows ``Title``;
functions and methods get ``()``. Loaded by mkdocs.yml (mkdocstrings python handler,
``extensions:``); tests/project/test_readme_docs.py fails the build on any role left.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(
    r"(?<![\w`]):(?:py:)?(?P<role>class|meth|func|attr|mod|exc|data|obj|const|ref)"
    r":`(?P<body>[^`]+)`"
)
_TITLED = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", flags=re.S)
_CALLABLE = {"func", "meth"}


def _members(obj: Any) -> dict[str, Any]:
    """The members of ``obj``, inherited ones included where the bases resolve."""
    try:
        return obj.all_members if obj.is_class else obj.members
    except Exception:  # an unresolvable base class: own members only
        return obj.members


class Resolver:
    """Looks dotted names up in the loaded package, following imports (aliases)."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self._paths: list[str] | None = None

    def lookup(self, path: str, depth: int = 0) -> Any | None:
        """The object (never an alias) at ``path``, or None when nothing is there."""
        if depth > 20 or not path:
            return None
        first, *rest = path.split(".")
        try:
            obj = self.collection.members[first]
        except KeyError:
            return None
        for part in rest:
            obj = self._follow(obj, depth)
            if obj is None or part not in _members(obj):
                return None
            obj = _members(obj)[part]
        return self._follow(obj, depth)

    def _follow(self, obj: Any, depth: int) -> Any | None:
        if obj.is_alias:
            return self.lookup(obj.target_path, depth + 1)
        return obj

    def by_suffix(self, name: str) -> Any | None:
        """The one object whose path ends with ``.name``, or None (none or several)."""
        if self._paths is None:
            self._paths = []
            stack = list(self.collection.members.values())
            while stack:
                obj = stack.pop()
                self._paths.append(obj.path)
                stack.extend(m for m in obj.members.values() if not m.is_alias)
        found = [p for p in self._paths if p.endswith("." + name)]
        return self.lookup(found[0]) if len(found) == 1 else None

    def resolve(self, name: str, scope: Any) -> str | None:
        """The path of the object ``name`` means in ``scope``'s docstring, or None."""
        relative = name.startswith(".")
        name = name.lstrip(".")
        while scope is not None:
            if scope.is_module or scope.is_class:
                found = self.lookup(f"{scope.path}.{name}")
                if found is not None:
                    return found.path
            scope = scope.parent
        found = self.lookup(name)
        if found is None and (relative or "." in name):
            found = self.by_suffix(name)
        return None if found is None else found.path


def render_role(match: re.Match[str], resolver: Resolver, scope: Any) -> str:
    """Markdown for one role: an optional autoref around code, or plain code/text."""
    role = match["role"]
    body = " ".join(match["body"].split())
    titled = _TITLED.fullmatch(body)
    title, target = (titled["title"], titled["target"]) if titled else (None, body)
    if role == "ref":
        return title or target
    nolink = target.startswith("!")
    target = target.lstrip("!")
    short = target.startswith("~")
    target = target.lstrip("~")
    if title is None:
        title = target.lstrip(".")
        if short:
            title = title.rsplit(".", 1)[-1]
        if role in _CALLABLE:
            title += "()"
    code = f"`{title}`"
    path = None if nolink else resolver.resolve(target, scope)
    if path is None:
        return code
    return f'<autoref identifier="{path}" optional>{code}</autoref>'


def rewrite(text: str, resolver: Resolver, scope: Any) -> str:
    """``text`` with every reST role replaced (see the module docstring)."""
    return ROLE.sub(lambda m: render_role(m, resolver, scope), text)


class ReSTRoles(griffe.Extension):
    """Rewrites the reST roles of every docstring of a loaded package."""

    def on_package(self, *, pkg: Any, loader: Any, **kwargs: Any) -> None:
        resolver = Resolver(loader.modules_collection)
        stack = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None and ":`" in obj.docstring.value:
                obj.docstring.value = rewrite(obj.docstring.value, resolver, obj)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
