"""buffer -> Minari -> buffer round trips, Minari's own loader, row filling, the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("gymnasium")
minari = pytest.importorskip("minari")

import gymnasium as gym  # noqa: E402

import recollect as rc  # noqa: E402
from datasets_helpers import (  # noqa: E402
    ImageDictEnv,
    assert_same_episode,
    collect,
    reference_episodes,
)
from recollect.cli import main  # noqa: E402
from recollect.datasets import from_minari, to_minari  # noqa: E402
from recollect.datasets.episodes import _stored_episodes, episode_bounds  # noqa: E402
from recollect.datasets.filling import plan_rows  # noqa: E402
from recollect.errors import InvalidArgumentError, SpecError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # Minari's metadata advice


@pytest.fixture(autouse=True)
def minari_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


@pytest.fixture(scope="module")
def cartpole_buffer():
    """2 rows, the ring wrapped: cut episodes at row starts, running ones at row ends."""
    envs = [gym.make("CartPole-v1") for _ in range(2)]
    return collect(envs, steps=300, capacity=400, seed=3)


@pytest.fixture(scope="module")
def image_buffer():
    return collect([ImageDictEnv(), ImageDictEnv()], steps=40, capacity=60, seed=1)


def test_stored_episodes_matches_the_step_by_step_reference(cartpole_buffer, image_buffer):
    for buf in (cartpole_buffer, image_buffer):
        fast, fast_skipped = _stored_episodes(buf)
        slow, slow_skipped = reference_episodes(buf)
        assert fast_skipped == slow_skipped > 0
        assert len(fast) == len(slow) > 0
        for a, b in zip(fast, slow, strict=True):
            assert_same_episode(a, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40))
def test_episode_bounds_equal_a_python_scan(flags):
    is_first = np.array([f for f, _ in flags], bool)
    is_last = np.array([last for _, last in flags], bool)
    starts, ends, skipped = episode_bounds(is_first, is_last)
    want, want_skipped, start, complete = [], 0, 0, bool(len(flags) and is_first[0])
    for t in range(len(flags)):
        if t > start and is_first[t]:
            start, complete = t, True
        if is_last[t]:
            want_skipped += not complete
            want += [(start, t)] if complete else []
            start, complete = t + 1, True
    want_skipped += start < len(flags)
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == want
    assert skipped == want_skipped


def test_round_trip_cartpole_every_complete_episode_identical(cartpole_buffer):
    out = to_minari(cartpole_buffer, "cartpole/random-v0", env="CartPole-v1")
    episodes, skipped = _stored_episodes(cartpole_buffer)
    assert (out.episodes, out.skipped) == (len(episodes), skipped)
    assert out.steps == sum(len(ep["is_last"]) - 1 for ep in episodes)
    back = from_minari("cartpole/random-v0")
    assert back.num_frames() == sum(len(ep["is_last"]) for ep in episodes)
    again, again_skipped = _stored_episodes(back)
    assert again_skipped == 0 and len(again) == len(episodes)
    for a, b in zip(episodes, again, strict=True):
        assert_same_episode(a, b)


def test_round_trip_image_dict_observations_identical(image_buffer):
    to_minari(image_buffer, "imagedict/random-v0")
    back = from_minari("imagedict/random-v0", rng=0)
    assert back.data_spec["observation"]["image"] == rc.ArraySpec((32, 32, 3), np.uint8)
    episodes, _ = _stored_episodes(image_buffer)
    again, _ = _stored_episodes(back)
    assert len(again) == len(episodes) > 3
    for a, b in zip(episodes, again, strict=True):
        assert_same_episode(a, b)


def test_minari_load_dataset_iterates_the_same_episodes(image_buffer):
    to_minari(image_buffer, "imagedict/check-v0", author="tests")
    dataset = minari.load_dataset("imagedict/check-v0")
    episodes, _ = _stored_episodes(image_buffer)
    assert dataset.total_episodes == len(episodes)
    assert dataset.storage.metadata["author"] == {"tests"} or "tests" in str(
        dataset.storage.metadata["author"]
    )
    for ep, data in zip(episodes, dataset.iterate_episodes(), strict=True):
        length = len(ep["is_last"]) - 1
        assert len(data) == length
        for key in ("image", "state"):
            np.testing.assert_array_equal(data.observations[key], ep["observation"][key])
        np.testing.assert_array_equal(data.actions, ep["action"][:length])
        np.testing.assert_array_equal(data.rewards, ep["reward"][:length])
        assert data.terminations[-1] == ep["is_terminal"][-1]
        assert data.truncations[-1] == (not ep["is_terminal"][-1])
        assert not data.terminations[:-1].any() and not data.truncations[:-1].any()


def test_from_minari_keeps_terminations_and_truncations_apart(image_buffer):
    to_minari(image_buffer, "imagedict/ends-v0")
    dataset = minari.load_dataset("imagedict/ends-v0")
    terminated = [bool(ep.terminations[-1]) for ep in dataset.iterate_episodes()]
    assert any(terminated) and not all(terminated)
    data = from_minari(dataset).gather_all()
    last = data["is_last"][0]
    np.testing.assert_array_equal(data["is_terminal"][0][last], terminated)
    assert not data["is_terminal"][0][~last].any()
    np.testing.assert_array_equal(data["discount"][0][last], ~np.array(terminated))
    np.testing.assert_array_equal(data["action"][0][last], 0)
    np.testing.assert_array_equal(data["reward"][0][last], 0)


def test_capacity_keeps_the_newest_whole_episodes(cartpole_buffer):
    to_minari(cartpole_buffer, "cartpole/newest-v0")
    episodes, _ = _stored_episodes(cartpole_buffer)
    lengths = [len(ep["is_last"]) for ep in episodes]
    keep = int(np.searchsorted(np.cumsum(lengths[::-1]), 100, side="right"))
    buf = from_minari("cartpole/newest-v0", capacity=100)
    assert buf.num_frames() == sum(lengths[len(lengths) - keep :])
    again, skipped = _stored_episodes(buf)
    assert skipped == 0
    for a, b in zip(episodes[len(episodes) - keep :], again, strict=True):
        assert_same_episode(a, b)


def test_several_rows_end_on_is_last_and_hold_dataset_episodes(cartpole_buffer):
    to_minari(cartpole_buffer, "cartpole/rows-v0")
    episodes, _ = _stored_episodes(cartpole_buffer)
    buf = from_minari("cartpole/rows-v0", capacity=240, num_envs=3, rng=0)
    data = buf.gather_all()
    assert data["is_last"][:, -1].all()
    again, _ = _stored_episodes(buf)
    assert again
    originals = {ep["observation"].tobytes(): ep for ep in episodes}
    for ep in again:
        assert_same_episode(originals[ep["observation"].tobytes()], ep)
    assert buf.sample(8, 2).data["observation"].shape == (8, 2, 4)


def test_plan_rows_balances_newest_first_and_respects_max_length():
    assert plan_rows([5, 3, 4, 2], 2, None) == [[1, 3], [0, 2]]
    assert plan_rows([5, 3, 4, 2], 1, 6) == [[2, 3]]
    assert plan_rows([5, 3, 4, 2], 1, 5) == [[3]]
    with pytest.raises(InvalidArgumentError, match="no episode fits"):
        plan_rows([5, 9], 1, 6)


def test_errors_name_the_problem(cartpole_buffer, tmp_path):
    to_minari(cartpole_buffer, "cartpole/err-v0")
    with pytest.raises(InvalidArgumentError, match="multiple of `num_envs`"):
        from_minari("cartpole/err-v0", capacity=101, num_envs=2)
    with pytest.raises(InvalidArgumentError, match="rows would get no episode"):
        from_minari("cartpole/err-v0", num_envs=1000)
    plain = rc.ReplayBuffer({"observation": rc.ArraySpec((2,), np.float32)}, 10)
    with pytest.raises(SpecError, match=r"missing \['action', 'reward', 'is_last'"):
        to_minari(plain, "xx/y-v0")
    spec = cartpole_buffer.data_spec
    running = rc.ReplayBuffer(spec, 10)
    step = {k: np.zeros(v.shape, v.dtype) for k, v in spec.items()}
    running.add(step)
    with pytest.raises(InvalidArgumentError, match="no complete episode"):
        to_minari(running, "xx/y-v0")


def test_import_recollect_loads_neither_minari_nor_tensorflow():
    code = (
        "import sys, recollect, recollect.datasets; "
        "bad = [m for m in ('minari', 'tensorflow', 'tensorflow_datasets') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_datasets_package_uses_no_private_attributes():
    src = Path(__file__).resolve().parents[2] / "src" / "recollect"
    files = [*(src / "datasets").glob("*.py"), src / "cli" / "datasets.py"]
    for path in files:
        hits = re.findall(r"\w+\._[a-z]\w*", path.read_text())
        assert not hits, (path.name, hits)


def test_cli_export_import_and_populate_from_dataset(cartpole_buffer, tmp_path):
    cartpole_buffer.save(tmp_path / "ck" / "live")
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["export", str(tmp_path / "ck" / "live"), "--to", "minari", "--dataset-id",
         "cartpole/cli-v0", "--env", "CartPole-v1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    episodes, skipped = _stored_episodes(cartpole_buffer)
    assert f"exported {len(episodes)} episodes" in result.output
    assert f"{skipped} incomplete" in result.output
    result = runner.invoke(
        main,
        ["import", "--from", "minari", "cartpole/cli-v0", "--checkpoint-dir",
         str(tmp_path / "ck"), "--buffer-name", "imported"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    again, _ = _stored_episodes(rc.load_buffer(tmp_path / "ck" / "imported"))
    for a, b in zip(episodes, again, strict=True):
        assert_same_episode(a, b)
    result = runner.invoke(
        main,
        ["populate", "--env", "CartPole-v1", "--from-dataset", "cartpole/cli-v0",
         "--capacity", "400", "--steps-per-run", "50", "--num-runs", "1",
         "--checkpoint-dir", str(tmp_path / "ck"), "--buffer-name", "seeded", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    seeded = rc.load_buffer(tmp_path / "ck" / "seeded")
    loaded = sum(len(ep["is_last"]) for ep in episodes)
    assert seeded.num_frames() == loaded + 50 + 1  # + the step closing the open episode
    data = seeded.gather_all()
    assert data["is_first"][0, loaded]  # collection starts a new episode after the dataset
    first, _ = _stored_episodes(seeded)
    assert_same_episode(first[0], episodes[0])


def test_cli_reports_unknown_dataset(tmp_path):
    result = CliRunner().invoke(
        main, ["import", "--from", "minari", "nope/none-v0", "--checkpoint-dir", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert "Minari dataset 'nope/none-v0' is not in the local Minari datasets" in result.output


def test_minari_warnings_do_not_escape_as_errors(cartpole_buffer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = to_minari(cartpole_buffer, "cartpole/warn-v0", env="CartPole-v1")
    assert out.dataset.total_episodes == out.episodes
