"""The readers share one interface: no adapter, stream or manager module asks whether it holds
a ReplayBuffer or a served table (an ``isinstance`` against those classes); they read through
:class:`recollect.buffers.source.SampleSource`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "recollect"
READERS = [
    "adapters/prefetch.py",
    "adapters/torch.py",
    "adapters/jax.py",
    "adapters/tf_data/__init__.py",
    "adapters/tf_data/chunks.py",
    "adapters/tf_data/eager.py",
    "adapters/tf_data/single_pass.py",
    "manager/__init__.py",
    "manager/checks.py",
    "manager/iterator.py",
    "service/client/stream.py",
]
SOURCE_CLASSES = {"ReplayBuffer", "TransitionBuffer", "TableHandle"}


def _names(node: ast.expr) -> set[str]:
    """Every class name in an isinstance's second argument (tuples, ``A | B``, ``mod.A``)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def source_type_checks(text: str) -> list[int]:
    """The lines of each isinstance/issubclass against a buffer or table handle class."""
    hits = []
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"isinstance", "issubclass"}
            and len(node.args) == 2
            and _names(node.args[1]) & SOURCE_CLASSES
        ):
            hits.append(node.lineno)
    return hits


@pytest.mark.parametrize("module", READERS)
def test_readers_never_check_whether_they_hold_a_buffer_or_a_served_table(module):
    path = SRC / module
    assert path.is_file(), f"{module} moved: update READERS"
    assert source_type_checks(path.read_text()) == [], module


def test_the_check_finds_type_checks_against_source_classes_in_any_spelling():
    text = (
        "isinstance(buffer, ReplayBuffer | rc.service.TableHandle)\n"
        "isinstance(buffer, (int, TransitionBuffer))\n"
        "isinstance(buffer, Sampler)\n"
        "not isinstance(table, TableHandle)\n"
    )
    assert source_type_checks(text) == [1, 2, 4]
