"""The README's quick-start block runs as written (README rot is a bug)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(section: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_quick_start_block_runs_and_samples_windows():
    namespace: dict = {}
    exec(compile(_python_blocks("Quick start")[0], "README.md", "exec"), namespace)
    sample = namespace["s"]
    assert sample.data["observation"].shape == (32, 2, 4)
    assert sample.ids.dtype.name == "int64" and sample.probabilities.dtype.name == "float64"
    assert len(namespace["buf"]) == 40


def test_readme_opens_with_the_two_setup_commands():
    first_block = README.read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines() == [
        'pip install -c constraints.txt -e ".[demo]" && recollect demo',
        'pip install -c constraints.txt -e ".[test]" && python -m pytest',
    ]


def test_rows_and_draw_protocol_block_runs_after_the_quick_start():
    namespace: dict = {}
    blocks = _python_blocks("Quick start")
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    (rows_block,) = [b for b in blocks if "rows=[2, 0]" in b]
    exec(compile(rows_block, "README.md", "exec"), namespace)
    assert namespace["buf"].steps_per_row().tolist() == [7, 6, 7, 6]
    assert namespace["sample"].data["observation"].shape == (32, 2, 4)
    assert set(namespace["state"]) == {"storage", "table"}
