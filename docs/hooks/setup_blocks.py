"""MkDocs hook: show the pages' hidden set-up blocks as collapsed blocks.

A page's code blocks run as tests (tests/project/test_readme_docs.py); a block inside an
HTML comment, ``<!-- setup`` ... ``-->``, runs too but is invisible in the Markdown
(e.g. on GitHub). On the site the later blocks use what it defines (``spec``,
``steps``), so this hook renders each such block as a collapsed ``??? example``
admonition (pymdownx.details): "Set-up" before the page's first visible block,
"Check" after it. The Markdown source, and so the test conventions, do not change.
"""

from __future__ import annotations

import re
from typing import Any

SETUP = re.compile(r"^<!-- setup\n(?P<block>```python\n.*?^```)\n-->$", flags=re.S | re.M)


def render(markdown: str) -> str:
    """``markdown`` with each hidden set-up block turned into a collapsed admonition."""

    def admonition(match: re.Match[str]) -> str:
        first = markdown.count("```python\n", 0, match.start()) == 0
        title = "Set-up (runs before the examples below)" if first else "Check (runs here)"
        body = "\n".join(("    " + line) if line else "" for line in match["block"].splitlines())
        return f'??? example "{title}"\n\n{body}'

    return SETUP.sub(admonition, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
