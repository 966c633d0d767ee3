"""Every Python block of the README and the documentation runs, as written, in order per
page (issue #28, item 2); the site builds with ``mkdocs build --strict``.

Conventions (docs/development.md, "Code blocks are tests"):

- The ```` ```python ```` blocks of a page run in one namespace, top to bottom, in a
  fresh temporary working directory.
- Hidden set-up: an HTML comment ``<!-- setup ... -->`` holding a ```` ```python ````
  block runs where it stands and is not shown on the site.
- ``<!-- test: slow -->`` on the line before a block: the block (and every block after it
  on that page) runs only with ``--run-slow`` or ``CI=true``. The page then has two tests:
  ``page`` runs the blocks before it, ``page[slow]`` (marked slow) runs all of them; a
  skipped slow part is reported by pytest, never silent.
- ``<!-- test: requires MODULE[, MODULE] -->`` on the line before the page's first block:
  the page needs these modules (installed by the ``test`` extra); without them the
  page's test is skipped with the reason.
- Blocks of other languages (bash, toml, text) are not run.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"(?P<marker><!-- test: (?P<kind>slow|requires) ?(?P<args>[^>]*?) ?-->\n)?"
    r"(?P<setup><!-- setup\n)?```python\n(?P<code>.*?)```",
    flags=re.S,
)

# a Sphinx role as Markdown renders it when nothing converts it: :class:<code>X</code>
# (a role written inside a code span, `:class:`X``, documents the syntax and is kept)
ROLE_IN_HTML = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const|ref):<code>")


@dataclass
class Block:
    code: str
    line: int
    slow: bool
    hidden: bool


def blocks(page: Path) -> tuple[list[Block], list[str]]:
    """The page's Python blocks in order, and the modules it requires."""
    text = page.read_text(encoding="utf-8")
    found, requires, slow = [], [], False
    for m in FENCE.finditer(text):
        if m["kind"] == "slow":
            slow = True
        elif m["kind"] == "requires":
            requires += [r.strip() for r in m["args"].split(",") if r.strip()]
        line = text.count("\n", 0, m.start("code")) + 1
        found.append(Block(m["code"], line, slow, m["setup"] is not None))
    return found, requires


def _cases():
    for page in PAGES:
        found, _ = blocks(page)
        if not found:
            continue
        name = str(page.relative_to(ROOT))
        if not found[0].slow:
            yield pytest.param(page, False, id=name)
        if any(b.slow for b in found):
            yield pytest.param(page, True, id=f"{name}[slow]", marks=pytest.mark.slow)


@pytest.mark.parametrize(("page", "with_slow"), list(_cases()))
def test_code_blocks_run_in_order(page: Path, with_slow: bool, tmp_path, monkeypatch):
    found, requires = blocks(page)
    for module in requires:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{page.name} needs {module} (pip install -c constraints.txt -e '.[test]')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for block in found:
        if block.slow and not with_slow:
            break
        code = "\n" * (block.line - 1) + block.code  # tracebacks show the page's line numbers
        exec(compile(code, str(page), "exec"), namespace)


def test_the_conventions_find_blocks_on_every_page_that_has_them():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert len(blocks(page)[0]) == text.count("```python\n"), page


def test_readme_is_the_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    first = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first.splitlines() == [
        'pip install -c constraints.txt -e ".[demo]" && recollect demo',
        'pip install -c constraints.txt -e ".[test]" && python -m pytest',
    ]
    assert "../shared" not in text and "docs/index.md" in text
    for link in re.findall(r"\]\(((?:docs|src|benchmarks)/[^)#]+)", text):
        assert (ROOT / link).exists(), link


@pytest.mark.slow  # about 7 s (a full mkdocs build): runs with CI=true / --run-slow
def test_mkdocs_build_strict(tmp_path):
    if (
        importlib.util.find_spec("mkdocs") is None
        or importlib.util.find_spec("mkdocstrings") is None
    ):
        pytest.skip("needs the docs extra: pip install -c constraints.txt -e '.[docs]'")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    site = tmp_path / "site"
    assert (site / "reference" / "index.html").exists()
    pages = {p.relative_to(site).as_posix(): p.read_text("utf-8") for p in site.rglob("*.html")}
    shutil.rmtree(site)
    # issue #36, item 4: no reST role shows as text (docs/hooks/griffe_roles.py makes links)
    roles = {
        page: sorted(set(ROLE_IN_HTML.findall(text)))[:5]
        for page, text in pages.items()
        if ROLE_IN_HTML.search(text)
    }
    assert not roles, f"literal reST roles in the built site: {roles}"
    reference = pages["reference/recollect.html"]
    assert re.search(
        r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*\.estimate_memory">'
        r"<code>estimate_memory\(\)</code></a> of the same arguments",
        reference,
    ), "ReplayBuffer.nbytes' :func:`~recollect.estimate_memory` is a link"
    # signatures are formatted (ruff, in the docs extra), not one cut-off line
    signatures = re.findall(r'<div class="doc-signature[^"]*">(.*?)</div>', reference, re.S)
    assert signatures
    lines = [
        line
        for block in signatures
        for line in html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines()
    ]
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    # the hidden set-up blocks show, collapsed (docs/hooks/setup_blocks.py)
    page = pages["how-to/per-nstep.html"]
    details = re.search(r"<details class=\"example\">(.*?)</details>", page, re.S)
    assert details and "Set-up" in details[1], "per-nstep shows its set-up block"
    assert "spec" in html.unescape(re.sub(r"<[^>]+>", "", details[1]))


def _module_all(module: str) -> list[str]:
    """``__all__`` of a recollect module, read without importing it (no framework needed)."""
    import ast

    base = ROOT / "src" / Path(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def test_the_api_reference_documents_every_public_name():
    documented: set[str] = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        for block in re.split(r"\n(?=::: )", text):
            m = re.match(r"::: (recollect(?:\.\w+)*)", block.strip())
            if not m:
                continue
            target = m[1]
            members = re.search(r"members: \[(.*?)\]", block)
            if members:
                names = re.findall(r'"(\w+)"', members[1])
            elif (ROOT / "src" / Path(*target.split("."))).exists() or (
                ROOT / "src" / Path(*target.split("."))
            ).with_suffix(".py").exists():
                names = _module_all(target)
            else:
                names = [target.rsplit(".", 1)[1]]
                target = target.rsplit(".", 1)[0]
            documented |= {f"{target}.{n}" for n in names} | {target}
    public = {f"recollect.{n}" for n in _module_all("recollect") if not n.startswith("_")}
    modules = ["samplers", "table", "storage", "service", "ray", "sb3", "datasets", "grpc"]
    for module in modules:
        public |= {f"recollect.{module}.{n}" for n in _module_all(f"recollect.{module}")}
    # a top-level name counts as documented where its defining module documents it
    short = {d.rsplit(".", 1)[-1] for d in documented}
    missing = sorted(p for p in public if p not in documented and p.rsplit(".", 1)[-1] not in short)
    assert not missing, f"add these to a page of docs/reference/: {missing}"


def test_files_the_benchmarks_cite_exist():
    cited = set()
    for script in (ROOT / "benchmarks").glob("*.py"):
        cited |= set(re.findall(r"\b([A-Z_]+\.md)\b", script.read_text(encoding="utf-8")))
    assert cited, "the benchmark docstrings cite WORKLOADS.md"
    for name in cited:
        assert (ROOT / "benchmarks" / name).exists(), name
    assert '--8<-- "benchmarks/WORKLOADS.md"' in (ROOT / "docs" / "benchmarks.md").read_text()


def test_recollect_commands_in_shell_blocks_use_existing_subcommands_and_options():
    """Shell blocks are not run, but every ``recollect ...`` line in them names a real
    subcommand and real options (checked against ``--help``)."""
    pytest.importorskip("click")
    from click.testing import CliRunner

    from recollect.cli import main

    runner = CliRunner()
    helps: dict[str, str] = {}
    checked = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            command = ""
            for line in block.splitlines():
                command += line.split("#")[0].rstrip().rstrip("\\") + " "
                if line.rstrip().endswith("\\"):
                    continue
                words = command.split()
                command = ""
                if "recollect" not in words:
                    continue
                args = words[words.index("recollect") + 1 :]
                if not args or args[0] in (">", "&&"):
                    continue
                sub = args[0]
                if sub not in helps:
                    result = runner.invoke(main, [sub, "--help"])
                    assert result.exit_code == 0, f"{page.name}: recollect {sub}: {result.output}"
                    helps[sub] = result.output
                for option in (a.split("=")[0] for a in args[1:] if a.startswith("--")):
                    assert option in helps[sub], f"{page.name}: recollect {sub} has no {option}"
                checked += 1
    assert checked >= 10
