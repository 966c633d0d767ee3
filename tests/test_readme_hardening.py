"""README claims found wrong by a new user (issue #14, items 12, 17, 20) now hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text(encoding="utf-8")


def python_blocks(heading: str) -> list[str]:
    body = TEXT.split(heading, 1)[1]
    body = re.split(r"\n##+ ", body, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def run(code: str, namespace: dict) -> dict:
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def test_checkpoint_block_resumes_from_the_saved_buffer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = run(python_blocks("## Quick start")[0], {})
    run(python_blocks("### Checkpoints and the manager")[0], namespace)
    import recollect as rc

    # create_or_load continued buf.save's 40 steps; checkpoint() kept them (no silent reset)
    assert rc.ReplayBuffer.load(tmp_path / "ckpt").num_frames() == 44


def test_frameworks_block_does_not_assume_cuda_and_imports_what_tf_agents_exports():
    (block,) = python_blocks("### Frameworks")
    assert 'device="cuda"' not in block and "torch.cuda.is_available()" in block
    pytest.importorskip("tensorflow")
    (line,) = [ln for ln in block.splitlines() if ln.startswith("from recollect.tf_agents")]
    namespace = run(line, {})
    assert namespace["tf_uniform_replay_buffer"].TFUniformReplayBuffer
    assert namespace["py_uniform_replay_buffer"].PyUniformReplayBuffer
    assert namespace["tensor_spec"].TensorSpec


def test_vector_env_block_runs():
    pytest.importorskip("gymnasium")
    namespace = run(python_blocks("## Quick start")[0], {})
    run(python_blocks("### Collecting from gymnasium vector envs")[0], namespace)
    assert namespace["replay"].num_frames() == 400
    assert namespace["batch"].data["observation"].shape == (32, 2, 4)


def test_readme_stays_inside_the_project():
    assert "../shared" not in TEXT and "shared/WORKLOADS" not in TEXT
    assert "**W1 atari**" in TEXT and "**Limit rows**" in TEXT


def test_demo_timings_are_ranges_and_docs_name_the_tf_and_jax_rules():
    assert re.search(r"training took \d+\.\d–\d+\.\d s", TEXT)
    assert "unwrap_error" in TEXT and "jax_enable_x64" in TEXT
    assert "create_or_load_replay_buffer" in TEXT and "--append" in TEXT
    assert "`float` -> float32, `int` -> int64, `bool` -> bool" in TEXT
