"""Ray shards restore through the one checkpoint resolution, at start and after a restart,
and ``serve`` on a damaged checkpoint raises recollect's CheckpointError (issue 23,
items 2 and 10). One loopback-only Ray session serves the module (``ray_session``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError
from service_checkpoints import MARKER, SPEC, service_checkpoint, steps

ray = pytest.importorskip("ray")
rc_ray = pytest.importorskip("recollect.ray")


@pytest.fixture(scope="module", autouse=True)
def _ray(ray_session):
    return ray_session


def kill_between_renames(shard: Path) -> None:
    """``shard`` as a save killed after renaming it to ``shard.old-<token>`` leaves it."""
    token = (shard / MARKER).read_text().strip()
    os.rename(shard, shard.with_name(f"{shard.name}.old-{token}"))


def named_actors(prefix: str) -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(prefix)
    ]


def test_serve_restores_the_checkpoint_an_interrupted_save_left(tmp_path):
    service_checkpoint(tmp_path, 20)
    kill_between_renames(tmp_path / "t" / "shard-0")
    client = rc_ray.serve(
        {"t": rc.ReplayBuffer(SPEC, 64, 2)}, name="interrupted", checkpoint_dir=tmp_path
    )
    try:
        info = client.info("t")
        assert (info.num_stored, info.lost_steps) == (20, 0)
        client.checkpoint()
    finally:
        client.close()
    assert len(rc.ReplayBuffer.load(tmp_path / "t" / "shard-0")) == 20


@pytest.mark.slow  # about 3.5 s (a shard actor killed and restarted): CI=true / --run-slow
def test_a_restarted_shard_restores_the_checkpoint_an_interrupted_save_left(tmp_path):
    client = rc_ray.serve(
        {"t": rc.ReplayBuffer(SPEC, 64, 2)},
        name="restart-interrupted",
        checkpoint_dir=tmp_path,
        max_restarts=1,
    )
    try:
        with client.writer("t", 2) as writer:
            for k in range(10):
                writer.add_batch(steps(k, 2))
        client.checkpoint()
        kill_between_renames(tmp_path / "t" / "shard-0")  # as a save killed with its shard
        actor = client.endpoints("t")[0].actor
        pid = ray.get(actor.where.remote())["pid"]
        ray.kill(actor, no_restart=False)
        deadline = time.monotonic() + 60
        while True:  # until the restarted actor (another process) answers
            try:
                if ray.get(actor.where.remote(), timeout=10)["pid"] != pid:
                    break
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
            assert time.monotonic() < deadline, "the shard did not come back"
            time.sleep(0.2)
        info = client.info("t")
        assert (info.num_stored, info.lost_steps) == (20, 0)
    finally:
        client.close()


@pytest.mark.parametrize("damage", ["leaf", "counters"])
def test_serve_on_a_damaged_checkpoint_raises_checkpoint_error_naming_shard_and_file(
    tmp_path, damage
):
    service_checkpoint(tmp_path, 20)
    if damage == "leaf":
        leaf = next((tmp_path / "t" / "shard-0").glob("state-*obs.npy"))
        leaf.write_bytes(leaf.read_bytes()[:-4])
        where = r"shard-0/state-\S*obs\.npy"
    else:
        counters = tmp_path / "t" / "shard-0.counters"
        counters.write_bytes(np.full(len(counters.read_bytes()) // 8, -1, np.int64).tobytes())
        where = r"shard-0\.counters"
    name = f"damaged-{damage}"
    with pytest.raises(CheckpointError, match=rf"table 't' shard 0: .*{where}"):
        rc_ray.serve({"t": rc.ReplayBuffer(SPEC, 64, 2)}, name=name, checkpoint_dir=tmp_path)
    deadline = time.monotonic() + 30
    while named_actors(name):  # serve stopped every actor it started
        assert time.monotonic() < deadline, named_actors(name)
        time.sleep(0.2)


def test_a_shard_actor_that_cannot_restore_answers_every_call_with_the_checkpoint_error(
    tmp_path,
):
    """What a client of a shard that Ray restarted onto a damaged checkpoint gets back."""
    from recollect.ray.actor import ShardActor
    from recollect.service.shard.split import shard_config
    from recollect.service.wire import codec
    from recollect.service.wire import requests as rq
    from recollect.service.wire.endpoint import Raised

    service_checkpoint(tmp_path, 20)
    leaf = next((tmp_path / "t" / "shard-0").glob("state-*obs.npy"))
    leaf.write_bytes(leaf.read_bytes()[:-4])
    config = shard_config(rc.ReplayBuffer(SPEC, 64, 2).config(), 1, 0, "t")
    actor = ShardActor("t", config, str(tmp_path), 60.0, local_writes=True)
    assert isinstance(actor.failed_restore(), CheckpointError)
    assert actor.chunk_listener() is None  # no socket for a shard without data
    for request in [rq.Info(), rq.Reserve(2, "localhost", os.getpid()), rq.SampleWindows(4)]:
        answer = codec.unpack(actor.call(codec.packed(request)))
        assert isinstance(answer, Raised) and isinstance(answer.error, CheckpointError)
        assert "table 't' shard 0" in str(answer.error) and "obs.npy" in str(answer.error)
