"""Soak test of the Ray replay service: 8 writer processes and 2 learners at full speed.

For ``SOAK_S`` seconds (default 60; env ``RECOLLECT_SOAK_S``) 8 writer actor
processes (8 envs each, chunks of 32 steps, 4 in flight) add steps to a
prioritized table served as 2 shards, while 2 learner processes sample 256 and
update 256 priorities. Every leaf of a step (float32, int64, int32, uint8)
encodes ``(writer, env, seq)``. The table holds every step (a writer stops
adding when its rows are full), so after the run a checkpoint of the shards
must hold, in each writer's rows, exactly the steps ``0 .. n-1`` it flushed, in
order: 0 lost, 0 duplicated, 0 torn (leaves of one step that disagree), 0 out
of order. Learners check every sampled item for torn leaves. The resident
memory of every process (driver, shards, writers, learners) is polled each
second and must stay bounded after a warm-up.

The run happens in a child process (``python tests/service/test_service_soak.py``): one
Ray session for the module, bound to 127.0.0.1, inside a loopback-only network
namespace (``unshare -rn``) where the machine allows it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SOAK_S = float(os.environ.get("RECOLLECT_SOAK_S", "60"))
WRITERS, ENVS, LEARNERS, SHARDS = 8, 8, 2, 2
ROW_STEPS = 1 << 18  # steps a row holds: no step is overwritten within the run
WARMUP_S = min(15.0, SOAK_S / 4)  # memory is measured from here on
CLIENT_RSS_GROWTH = 64 << 20  # writers, learners, driver: bytes of growth allowed after warm-up
SHARD_RSS_SLACK = 160 << 20  # shards: their stored bytes (+ priorities, index) plus this
STEP_OVERHEAD = 64  # bytes per stored step beyond its data: sum tree leaves and nodes, index


# -- what every step carries ---------------------------------------------------------------
def spec() -> dict[str, Any]:
    import recollect as rc

    return {
        "obs": rc.ArraySpec((3,), np.float32),
        "key": rc.ArraySpec((3,), np.int64),
        "small": rc.ArraySpec((3,), np.int32),
        "bytes": rc.ArraySpec((5,), np.uint8),
    }


def encode(writer: int, seq: int) -> dict[str, np.ndarray]:
    """One ``add_batch`` of ``ENVS`` envs: every leaf holds ``(writer, env, seq)``."""
    key = np.empty((ENVS, 3), np.int64)
    key[:, 0], key[:, 1], key[:, 2] = writer, np.arange(ENVS), seq
    le = np.frombuffer(np.int32(seq).tobytes(), np.uint8)
    return {
        "obs": key.astype(np.float32),  # exact below 2**24
        "key": key,
        "small": key.astype(np.int32),
        "bytes": np.concatenate([key[:, :2].astype(np.uint8), np.tile(le[:3], (ENVS, 1))], 1),
    }


def decode(leaves: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(key int64 [n, 3], torn bool [n])`` of steps with leaves ``[n, ...]``."""
    key = np.asarray(leaves["key"])
    b = np.asarray(leaves["bytes"]).astype(np.int64)
    from_bytes = np.stack([b[:, 0], b[:, 1], b[:, 2] | b[:, 3] << 8 | b[:, 4] << 16], 1)
    torn = np.zeros(len(key), bool)
    for other in (np.asarray(leaves["obs"]), np.asarray(leaves["small"]), from_bytes):
        torn |= (other.astype(np.int64) != key).any(1)
    return key, torn


# -- processes ---------------------------------------------------------------------------------
class SoakWriter:
    def pid(self) -> int:
        return os.getpid()

    def run(self, service: str, writer_id: int, stop_at: float) -> dict[str, Any]:
        import recollect.ray as rr

        client = rr.connect(service)
        with client.writer("soak", ENVS, chunk_length=32, max_in_flight=4) as writer:
            seq = 0
            while seq < ROW_STEPS and (seq & 63 or time.time() < stop_at):
                writer.add_batch(encode(writer_id, seq))
                seq += 1
            writer.flush()
            return {"steps": seq, "shard": writer.shard, "rows": writer.rows.tolist()}


class SoakLearner:
    def pid(self) -> int:
        return os.getpid()

    def run(self, service: str, stop_at: float, seed: int) -> dict[str, int]:
        import recollect.ray as rr

        client = rr.connect(service)
        rng = np.random.default_rng(seed)
        samples = torn = 0
        while time.time() < stop_at:
            sample = client.sample("soak", 256, timeout=30)
            _, bad = decode(sample.data)
            torn += int(bad.sum())
            client.update_priorities("soak", sample.ids, rng.random(256) + 0.01)
            samples += 1
        client.flush()
        return {"samples": samples, "torn": torn}


def rss(pids: dict[str, int]) -> dict[str, int]:
    import psutil

    out = {}
    for name, pid in pids.items():
        try:
            out[name] = psutil.Process(pid).memory_info().rss
        except psutil.Error:
            out[name] = -1
    return out


def soak(directory: str) -> dict[str, Any]:
    """The whole run (in the child process); returns its findings."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    import recollect as rc
    import recollect.ray as rr
    from recollect.service.shard import shard_path

    ray.init(
        address="local", _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False
    )
    sampler = rc.Prioritized(priority_exponent=0.6, epsilon=1e-6)
    buf = rc.ReplayBuffer(
        spec(), ROW_STEPS * WRITERS * ENVS, WRITERS * ENVS, sampler=sampler, sequence_length=1
    )
    client = rr.serve({"soak": buf}, num_shards=SHARDS, name="soak")
    writers = [ray.remote(num_cpus=0)(SoakWriter).remote() for _ in range(WRITERS)]
    learners = [ray.remote(num_cpus=0)(SoakLearner).remote() for _ in range(LEARNERS)]
    pids = {"driver": os.getpid()}
    pids.update({f"writer{k}": p for k, p in enumerate(ray.get([a.pid.remote() for a in writers]))})
    pids.update({f"learner{k}": ray.get(a.pid.remote()) for k, a in enumerate(learners)})
    for k, where in enumerate(rr.shard_locations(client, "soak")):
        pids[f"shard{k}"] = where["pid"]
    start = time.time()
    stop_at = start + SOAK_S
    runs = [w.run.remote("soak", k, stop_at) for k, w in enumerate(writers)]
    time.sleep(1.0)  # the learners start on a non-empty table
    learned = [a.run.remote("soak", stop_at, k) for k, a in enumerate(learners)]
    warm, peak = None, {}
    while time.time() < stop_at:
        time.sleep(1.0)
        now = rss(pids)
        if warm is None and time.time() - start >= WARMUP_S:
            warm = now
        if warm is not None:
            peak = {n: max(peak.get(n, 0), v) for n, v in now.items()}
    written = ray.get(runs, timeout=120)
    learned = ray.get(learned, timeout=120)
    final = rss(pids)
    peak = {n: max(peak.get(n, 0), v) for n, v in final.items()}
    elapsed = time.time() - start
    info = client.info("soak")
    client.checkpoint(directory)
    report = verify(directory, written, shard_path)
    stored_bytes = report["stored"] * (step_bytes() + STEP_OVERHEAD)
    client.close()
    ray.shutdown()
    return {
        **report,
        "seconds": elapsed,
        "inserts": info.inserts,
        "steps_per_s": report["stored"] / elapsed,
        "full_rows": sum(w["steps"] >= ROW_STEPS for w in written),
        "samples": sum(r["samples"] for r in learned),
        "sample_torn": sum(r["torn"] for r in learned),
        "rss_warm": warm,
        "rss_peak": peak,
        "shard_rss_allowed": stored_bytes // SHARDS + SHARD_RSS_SLACK,
    }


def step_bytes() -> int:
    return sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in spec().values())


def verify(directory: str, written: list[dict[str, Any]], shard_path: Any) -> dict[str, Any]:
    """Counts lost, duplicated, torn, foreign and out-of-order steps in the checkpoint."""
    import recollect as rc

    lost = duplicated = torn = foreign = disordered = stored = 0
    buffers: dict[int, Any] = {}
    for writer_id, run in enumerate(written):
        shard = run["shard"]
        if shard not in buffers:
            buffers[shard] = rc.ReplayBuffer.load(shard_path(directory, "soak", shard), mmap=True)
        for env, row in enumerate(run["rows"]):
            key, bad = decode(buffers[shard].gather_row(row))
            stored += len(key)
            torn += int(bad.sum())
            foreign += int(((key[:, 0] != writer_id) | (key[:, 1] != env)).sum())
            seq = key[:, 2]
            unique = np.unique(seq)
            duplicated += len(seq) - len(unique)
            lost += len(np.setdiff1d(np.arange(run["steps"]), unique))
            disordered += int((np.diff(seq) != 1).sum())
    return {
        "stored": stored,
        "lost": lost,
        "duplicated": duplicated,
        "torn": torn,
        "foreign": foreign,
        "disordered": disordered,
    }


# -- the test ----------------------------------------------------------------------------------
def _command() -> list[str]:
    """This file run by Python, in a loopback-only network namespace when allowed."""
    here = str(Path(__file__).resolve())
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"]).returncode == 0:
        script = 'ip link set lo up && exec "$0" "$@"'
        return ["unshare", "-rn", "bash", "-c", script, sys.executable, here]
    return [sys.executable, here]  # ray.init binds 127.0.0.1 only


@pytest.mark.slow
def test_ray_service_soak_loses_duplicates_tears_nothing_and_memory_stays_bounded(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("psutil")
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run(
        [*_command(), str(tmp_path / "checkpoint"), str(out)],
        env=env,
        check=True,
        timeout=SOAK_S + 180,
    )
    result = json.loads(out.read_text())
    print(json.dumps(result, indent=1))
    assert result["stored"] > 0 and result["samples"] > 0
    for count in ("lost", "duplicated", "torn", "foreign", "disordered", "sample_torn"):
        assert result[count] == 0, (count, result)
    warm, peak = result["rss_warm"], result["rss_peak"]
    for name, before in warm.items():
        growth = peak[name] - before
        limit = result["shard_rss_allowed"] if name.startswith("shard") else CLIENT_RSS_GROWTH
        assert growth <= limit, f"{name} grew {growth / 2**20:.0f} MiB after warm-up"


if __name__ == "__main__":
    checkpoint, result_file = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp() if checkpoint == "-" else checkpoint
    findings = soak(tmp)
    Path(result_file).write_text(json.dumps(findings))
