"""``recollect serve``: the TOML schema (no Ray) and one served, connected run (loopback Ray)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import recollect as rc
from recollect.cli import main
from recollect.cli.serve import connect_snippet
from recollect.cli.table_config import ConfigError, load_service_config, parse_service_config

HERE = Path(__file__).resolve().parents[1]
EXAMPLE = HERE.parent / "src" / "recollect" / "cli" / "tables.toml"


def _doc(**table: object) -> dict:
    base = {"capacity": 64, "num_envs": 4, "spec": {"x": {"shape": [2], "dtype": "float32"}}}
    return {"service": {"name": "t"}, "tables": {"replay": {**base, **table}}}


def test_example_file_builds_every_table_with_its_sampler_and_limiter():
    config = load_service_config(EXAMPLE)
    assert (
        config.name == "apex"
        and config.num_shards == {"replay": 1, "frames": 1}
        and config.placement == "default"
    )
    replay, frames = config.tables["replay"], config.tables["frames"]
    assert (replay.capacity, replay.num_envs) == (100_000, 16)
    assert replay.info().sampler["type"] == "Prioritized"
    assert replay.info().rate_limiter["type"] == "SampleToInsertRatio"
    spec = frames.data_spec
    assert spec["observation"]["pixels"] == rc.ArraySpec((8, 8, 3), np.uint8)
    assert spec["observation"]["state"].dtype == np.float16
    assert spec["action"].dtype == np.int32 and spec["is_last"].shape == ()


def test_defaults_fill_the_service_table():
    doc = _doc()
    del doc["service"]
    config = parse_service_config(doc)
    assert (config.name, config.max_restarts) == ("recollect", 0)
    assert set(config.num_shards.values()) == {1}
    assert config.lease_timeout_s == 60.0


def _svc(**service: object) -> dict:
    return {"service": service, "tables": _doc()["tables"]}


def _leaf(shape: object, dtype: object) -> dict:
    return _doc(spec={"x": {"shape": shape, "dtype": dtype}})


RATIO = {"type": "SampleToInsertRatio", "samples_per_insert": 4.0, "min_size_to_sample": 10}
BAD = [
    ({"service": {}}, r"`<file>` needs `tables`"),
    ({"tables": {}, "extra": 1}, r"unknown key `<file>.extra`"),
    ({"tables": {}}, r"`tables` must be a non-empty table"),
    (_doc(capacity="big"), r"`tables.replay.capacity` must be an integer >= 1; got 'big' \(str\)"),
    (_doc(num_envs=0), r"`tables.replay.num_envs` must be an integer >= 1; got 0 \(int\)"),
    (_doc(capacity=10), r"`tables.replay`: `capacity` must be a positive multiple of"),
    (_doc(colour=1), r"unknown key `tables.replay.colour`; `tables.replay` takes"),
    (_doc(sequence_length=True), r"`tables.replay.sequence_length` .* got True \(bool\)"),
    (_doc(spec={}), r"`tables.replay.spec` must be a non-empty table"),
    (_doc(spec={"x": {"shape": [2]}}), r"`tables.replay.spec.x` needs `dtype`"),
    (_leaf([-1], "uint8"), r"`tables.replay.spec.x.shape` must be a list of integers >= 0"),
    (_leaf([], "floaty"), r"`tables.replay.spec.x.dtype` must be a numpy dtype .*got 'floaty'"),
    (_doc(spec={"o": {"x": {"shape": [], "dtype": 3}}}), r"`tables.replay.spec.o.x.dtype`.*got 3"),
    (_doc(sampler="Prioritized"), r"`tables.replay.sampler` must be a table with a string `type`"),
    (_doc(sampler={"type": "Best"}), r"`tables.replay.sampler`: no sampler class named 'Best'"),
    (_doc(sampler={"type": "Prioritized", "alpha": 1}), r"`tables.replay.sampler` \(type .*alpha"),
    (_doc(sampler={"type": "Prioritized"}), r"`tables.replay`: .*sequence_length"),
    (_doc(rate_limiter={"type": "Fast"}), r"`tables.replay.rate_limiter`: no rate limiter named"),
    (_doc(rate_limiter={"type": "MinSize"}), r"`tables.replay.rate_limiter` \(type 'MinSize'\)"),
    (_doc(rate_limiter={**RATIO, "error_buffer": 1.0}), r"`tables.replay.rate_limiter`: the error"),
    (_doc(num_shards=3), r"`tables.replay.num_envs` must be a multiple of num_shards=3 .*; got 4"),
    (_svc(name="a/b"), r"`service.name` must be a non-empty string without '/'; got 'a/b'"),
    (_svc(placement="pack"), r"`service.placement` must be \"default\" or \"spread\"; got 'pack'"),
    (_svc(port=1), r"unknown key `service.port`"),
    (_svc(lease_timeout_s=0), r"`service.lease_timeout_s` must be a number > 0"),
]


@pytest.mark.parametrize(("doc", "match"), BAD)
def test_bad_documents_name_the_key_the_expectation_and_the_value(doc, match):
    with pytest.raises(ConfigError, match=match):
        parse_service_config(doc)


def test_tables_may_have_their_own_shard_counts():
    doc = _doc(num_shards=2)
    doc["tables"]["other"] = {**_doc()["tables"]["replay"], "num_shards": 4}
    assert parse_service_config(doc).num_shards == {"replay": 2, "other": 4}


def test_unreadable_and_invalid_files_say_so(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read .*missing.toml"):
        load_service_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[tables\n")
    with pytest.raises(ConfigError, match=r"bad.toml is not valid TOML"):
        load_service_config(bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("[tables.replay]\ncapacity = 8\n")
    with pytest.raises(ConfigError, match=r"wrong.toml: `tables.replay` needs `num_envs`"):
        load_service_config(wrong)


def test_cli_reports_config_errors_without_starting_ray(tmp_path):
    wrong = tmp_path / "wrong.toml"
    spec = 'spec = { x = { shape = [], dtype = "f4" } }'
    wrong.write_text(f"[tables.replay]\ncapacity = 8\nnum_envs = 2\n{spec}\nlossy = 1\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(wrong)])
    assert result.exit_code == 1
    assert "unknown key `tables.replay.lossy`" in result.output
    assert "ray" not in sys.modules or "ray address" not in result.output


def test_detach_needs_a_ray_address(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--config", str(EXAMPLE), "--detach"])
    assert result.exit_code == 2 and "--detach needs --ray-address" in result.output


def test_connect_snippet_sets_the_auth_mode_before_importing_ray():
    lines = connect_snippet("127.0.0.1:6379", "apex", token_auth=True).splitlines()
    auth = next(i for i, x in enumerate(lines) if "RAY_AUTH_MODE" in x)
    assert auth < lines.index("import ray")
    assert 'ray.init(address="127.0.0.1:6379"' in lines[-2]
    assert lines[-1] == 'client = recollect.ray.connect("apex")'
    assert "RAY_AUTH_MODE" not in connect_snippet("a:1", "x", token_auth=False)
    assert lines[-2].endswith('_node_ip_address="127.0.0.1")')  # a loopback cluster stays there
    assert "_node_ip_address=None" in connect_snippet("10.0.0.2:6379", "x", token_auth=False)


def test_scenario_file_is_valid():
    tomllib.loads((HERE / "scenario_tables.toml").read_text())


@pytest.mark.slow  # about 9 s (a Ray cluster): runs with CI=true / --run-slow
def test_serve_on_loopback_ray_accepts_a_client_and_checkpoints_on_ctrl_c(tmp_path):
    pytest.importorskip("ray")
    from loopback import run_in_loopback

    scenario, tables = HERE / "serve_scenario.py", HERE / "scenario_tables.toml"
    argv = [sys.executable, str(scenario), str(tables), "--checkpoint-dir", str(tmp_path / "ck")]
    result = run_in_loopback(argv, timeout_s=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SCENARIO OK inserts=24 samples=8" in result.stdout
    assert "checkpointing to" in result.stdout and "serve exited 0" in result.stdout
    assert (tmp_path / "ck" / "service.json").is_file()
    assert (tmp_path / "ck" / "steps" / "shard-0").is_dir()
