"""buffer -> RLDS (TFDS) -> buffer round trips; from_rlds on any tf.data.Dataset of episodes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")
tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")

import gymnasium as gym  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import recollect as rc  # noqa: E402
from datasets_helpers import ImageDictEnv, assert_same_episode, collect  # noqa: E402
from recollect.cli import main  # noqa: E402
from recollect.datasets import from_rlds, to_rlds  # noqa: E402
from recollect.datasets.episodes import _stored_episodes  # noqa: E402
from recollect.errors import InvalidArgumentError, SpecError  # noqa: E402


@pytest.fixture(scope="module")
def image_buffer():
    return collect([ImageDictEnv(), ImageDictEnv()], steps=40, capacity=60, seed=2)


@pytest.fixture(scope="module")
def cartpole_buffer():
    return collect([gym.make("CartPole-v1")], steps=150, capacity=120, seed=4)


def _train(path):
    return tfds.builder_from_directory(str(path)).as_dataset(split="train")


def test_round_trip_image_dict_observations_identical(image_buffer, tmp_path):
    out = to_rlds(image_buffer, tmp_path / "rlds")
    episodes, skipped = _stored_episodes(image_buffer)
    assert (out.episodes, out.skipped) == (len(episodes), skipped)
    assert out.steps == sum(len(ep["is_last"]) for ep in episodes)
    back = from_rlds(_train(out.path), rng=0)
    assert back.data_spec == image_buffer.data_spec
    again, again_skipped = _stored_episodes(back)
    assert again_skipped == 0 and len(again) == len(episodes) > 3
    for a, b in zip(episodes, again, strict=True):
        assert_same_episode(a, b)


def test_tfds_reads_rlds_episodes_with_the_rlds_step_fields(cartpole_buffer, tmp_path):
    out = to_rlds(cartpole_buffer, tmp_path / "rlds", name="cartpole_random")
    builder = tfds.builder_from_directory(str(out.path))
    assert builder.info.splits["train"].num_examples == out.episodes
    steps_spec = builder.info.features["steps"]
    assert isinstance(steps_spec, tfds.features.Dataset)
    keys = {"observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal"}
    assert set(steps_spec.feature.keys()) == keys
    episodes, _ = _stored_episodes(cartpole_buffer)
    for ep, record in zip(episodes, builder.as_dataset(split="train"), strict=True):
        steps = list(record["steps"].as_numpy_iterator())
        assert len(steps) == len(ep["is_last"])
        assert steps[0]["is_first"] and steps[-1]["is_last"]
        np.testing.assert_array_equal([s["observation"] for s in steps], ep["observation"])


def test_from_rlds_accepts_in_memory_datasets_of_both_step_forms():
    rng = np.random.default_rng(0)
    lengths = [4, 2, 5]
    episodes = []
    for n in lengths:
        steps = {
            "observation": rng.standard_normal((n, 3)).astype(np.float32),
            "action": rng.integers(0, 4, n),
            "reward": rng.standard_normal(n).astype(np.float32),
            "is_first": np.arange(n) == 0,
            "is_last": np.arange(n) == n - 1,
            "is_terminal": np.arange(n) == n - 1,
        }
        episodes.append(steps)

    def nested():
        for ep in episodes:
            yield {"steps": tf.data.Dataset.from_tensor_slices(ep), "episode_id": 7}

    signature = {
        "steps": tf.data.DatasetSpec(
            {k: tf.TensorSpec(v.shape[1:], tf.as_dtype(v.dtype)) for k, v in episodes[0].items()}
        ),
        "episode_id": tf.TensorSpec((), tf.int32),
    }
    as_datasets = tf.data.Dataset.from_generator(nested, output_signature=signature)
    stacked = {
        "steps": {
            k: tf.TensorSpec((None, *v.shape[1:]), tf.as_dtype(v.dtype))
            for k, v in episodes[0].items()
        }
    }
    as_tensors = tf.data.Dataset.from_generator(
        lambda: ({"steps": ep} for ep in episodes), output_signature=stacked
    )
    for ds in (as_datasets, as_tensors):
        buf = from_rlds(ds, capacity=12, num_envs=1)
        again, _ = _stored_episodes(buf)
        assert [len(ep["is_last"]) for ep in again] == lengths
        for a, b in zip(episodes, again, strict=True):
            assert_same_episode(a, b)


def test_errors_name_the_problem(cartpole_buffer, tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(InvalidArgumentError, match="exists; give a new directory"):
        to_rlds(cartpole_buffer, tmp_path / "taken")
    spec = {"observation": (rc.ArraySpec((2,), np.float32),), "is_last": rc.ArraySpec((), bool)}
    with pytest.raises(SpecError, match="'observation' is a tuple"):
        to_rlds(rc.ReplayBuffer(spec, 4), tmp_path / "tuple")
    with pytest.raises(SpecError, match=r"missing \['is_last'\]"):
        to_rlds(rc.ReplayBuffer({"x": rc.ArraySpec((), np.int8)}, 4), tmp_path / "x")
    strings = tf.data.Dataset.from_tensors(
        {"steps": {"is_last": tf.constant([True]), "lang": tf.constant(["a"])}}
    )
    with pytest.raises(SpecError, match=r"tf\.string"):
        from_rlds(strings)
    assert not (tmp_path / "tuple").exists() and not (tmp_path / "x").exists()


def test_cli_export_to_rlds_then_import(cartpole_buffer, tmp_path):
    cartpole_buffer.save(tmp_path / "ck" / "live")
    runner = CliRunner()
    out = tmp_path / "rlds"
    result = runner.invoke(main, ["export", str(tmp_path / "ck" / "live"), "--to", "rlds"])
    assert result.exit_code != 0 and "--to rlds needs --output" in result.output
    result = runner.invoke(
        main, ["export", str(tmp_path / "ck" / "live"), "--to", "rlds", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        main,
        ["import", "--from", "rlds", str(out), "--checkpoint-dir", str(tmp_path / "ck"),
         "--buffer-name", "back"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    episodes, _ = _stored_episodes(cartpole_buffer)
    again, _ = _stored_episodes(rc.load_buffer(tmp_path / "ck" / "back"))
    for a, b in zip(episodes, again, strict=True):
        assert_same_episode(a, b)
