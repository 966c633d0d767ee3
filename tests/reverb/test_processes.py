"""recollect.reverb across processes: a server in a child process, clients over gRPC.

Why these tests cannot hang the suite (pytest-timeout's thread method would end the whole
run after 900 s): the server runs in a fresh interpreter (``subprocess``, never a fork of
this process, whose gRPC threads a fork would copy into a child that then deadlocks); it
prints its port flushed (a block-buffered pipe would hold the line back) and it is read
with a deadline (``select``); the server serves until its stdin closes, so it cannot
stop before the test is done (a child waiting on an inherited stdin would read EOF at
once and stop) and dies with the test's process; the first call is ``server_info`` with
a timeout; every other call runs under :func:`bounded`, which kills the server (ending
calls in flight) and fails the test when it is not done in time.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import recollect.reverb as reverb
from loopback import loopback_available, run_in_loopback
from reverb_dtypes import NUMERIC_DTYPES

pytest.importorskip("grpc")

CHILD = str(Path(__file__).with_name("reverb_child.py"))
START_S = 60.0  # seconds for a child to import and print its port (a guard, not a timing)
CALL_S = 60.0  # seconds for a test's calls (a guard, not a timing)


class ChildServer:
    """A ``reverb_child.py serve`` process and its address."""

    def __init__(self, checkpoint_dir: str | None = None) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        argv = [sys.executable, "-u", CHILD, "serve", *([checkpoint_dir] if checkpoint_dir else [])]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        try:
            line = self._read_line(START_S)
            if not line.startswith("PORT "):
                raise AssertionError(f"the child server printed {line!r}; {self.output()}")
            self.address = f"localhost:{int(line.split()[1])}"
        except BaseException:
            self.stop()
            raise

    def _read_line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(
                f"the child server printed no port in {timeout} s; {self.output()}"
            )
        return self.process.stdout.readline()  # type: ignore[union-attr]

    def output(self) -> str:
        self.stderr.seek(0)
        return f"exit code {self.process.poll()}, stderr: {self.stderr.read()[-3000:]}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> int | None:
        """Close its stdin (it stops and exits 0); kill it if it does not within 15 s."""
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.process.stdout.close()  # type: ignore[union-attr]
        self.stderr.close()
        return self.process.returncode


def bounded(server: ChildServer, fn: Callable[[], Any], timeout: float = CALL_S) -> Any:
    """``fn()`` in a thread; when not done within ``timeout`` kill the server and fail."""
    result: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as err:
            error.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        output = server.output()
        server.kill()
        thread.join(10)
        pytest.fail(f"the client calls did not finish in {timeout} s; server {output}")
    if error:
        raise error[0]
    return result[0] if result else None


@pytest.fixture
def child(tmp_path) -> Iterator[ChildServer]:
    """A fresh server process per test (a killed one cannot slow the next test down)."""
    server = ChildServer(str(tmp_path / "checkpoints"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(child: ChildServer) -> reverb.Client:
    """A client of ``child``, its connection checked by a first call with a timeout."""
    client = reverb.Client(child.address)
    assert sorted(client.server_info(timeout=CALL_S)) == ["prio", "queue", "uniform"]
    return client


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_client_in_another_process_goes_over_grpc(client):
    assert type(client.channel).__name__ == "_MappedChannel"  # not the in-process channel


def test_insert_sample_mutate_info_reset_and_checkpoint_across_processes(child, client):
    def scenario() -> None:
        client.insert({"obs": np.arange(3, dtype=np.float32), "t": np.int64(7)}, {"prio": 2.0})
        client.insert({"obs": np.ones(3, np.float32), "t": np.int64(8)}, {"prio": 1.0})
        samples = [s[0] for s in client.sample("prio", 20)]
        assert {s.info.table_size for s in samples} == {2}
        by_t = {int(s.data[1]): s for s in samples}
        assert set(by_t) == {7, 8}
        np.testing.assert_array_equal(by_t[7].data[0], np.arange(3, dtype=np.float32))
        assert by_t[7].info.priority == 2.0 and by_t[8].info.probability == pytest.approx(1 / 3)
        client.mutate_priorities("prio", updates={by_t[7].info.key: 0.0})
        assert {int(s[0].data[1]) for s in client.sample("prio", 10)} == {8}
        client.mutate_priorities("prio", deletes=[by_t[8].info.key])
        info = client.server_info(timeout=CALL_S)
        assert info["prio"].current_size == 1 and info["prio"].num_deleted_episodes >= 0
        path = client.checkpoint()
        assert Path(path).is_dir()
        client.reset("prio")
        assert client.server_info(timeout=CALL_S)["prio"].current_size == 0

    bounded(child, scenario)


def test_trajectory_writer_items_across_processes(child, client):
    def scenario() -> list[reverb.ReplaySample]:
        with client.trajectory_writer(3) as writer:
            for i in range(5):
                writer.append({"x": np.full(2, i, np.int32), "name": f"s{i}"})
                if i >= 2:
                    writer.create_item(
                        "queue",
                        1.0,
                        {"x": writer.history["x"][-3:], "name": writer.history["name"][-1]},
                    )
        return [s for s in client.sample("queue", 3, emit_timesteps=False)]

    samples = bounded(child, scenario)
    for i, sample in zip(range(2, 5), samples, strict=True):
        name, x = sample.data  # flattened in sorted key order
        np.testing.assert_array_equal(x, np.full((3, 2), [[i - 2], [i - 1], [i]], np.int32))
        assert name.dtype == object and name.item() == f"s{i}".encode()


def _step(i: int) -> dict[str, Any]:
    step: dict[str, Any] = {f"x{j}": np.full(2, i, dt) for j, dt in enumerate(NUMERIC_DTYPES)}
    step.update(s=f"s{i} é", b=b"b\x00%d" % i, strs=np.array(["ab", ""]), raw=np.array([b"\xff"]))
    return step


def test_every_reverb_dtype_str_and_bytes_cross_processes_as_in_process(child, client):
    def sample_one(c: reverb.Client) -> reverb.ReplaySample:
        c.insert(_step(3), {"uniform": 1.0})
        return next(c.sample("uniform", 1, emit_timesteps=False))

    remote = bounded(child, lambda: sample_one(client))
    with reverb.Server([reverb.Table.queue("uniform", 10)]) as server:
        local = sample_one(server.localhost_client())
    assert len(remote.data) == len(local.data) == len(NUMERIC_DTYPES) + 4
    for got, want in zip(remote.data, local.data, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    names = sorted(_step(0))
    assert remote.data[names.index("s")].tolist() == ["s3 é".encode()]  # str comes back bytes
    assert remote.data[names.index("b")].tolist() == [b"b\x003"]
    assert remote.data[names.index("strs")].tolist() == [[b"ab", b""]]
    assert remote.data[names.index("raw")].tolist() == [[b"\xff"]]


def test_a_second_client_process_writes_while_this_one_samples(child, client):
    n = 200
    writer = subprocess.Popen(
        [sys.executable, "-u", CHILD, "write", child.address, "queue", str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # the queue holds 10 items: the writer blocks until this process takes them
        samples = bounded(child, lambda: list(client.sample("queue", n, emit_timesteps=False)))
        out, _ = writer.communicate(timeout=CALL_S)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(10)
    assert writer.returncode == 0 and f"WROTE {n}" in out, out
    names, xs = zip(*(s.data for s in samples), strict=True)  # sorted keys: name, x
    assert [int(x[1, 0]) for x in xs] == list(range(1, n + 1))  # each once, in order (FIFO)
    assert [int(x[0, 0]) for x in xs] == list(range(n))
    assert [name.item() for name in names] == [f"step {i}".encode() for i in range(1, n + 1)]


def test_nothing_listening_raises_deadline_exceeded_within_its_timeout():
    address = f"localhost:{free_port()}"
    start = time.monotonic()
    with pytest.raises(reverb.errors.DeadlineExceededError, match=r"within provided timeout of 1"):
        reverb.Client(address).server_info(timeout=1)
    assert time.monotonic() - start < CALL_S  # returned, not hung


def _server_info_from_child(address: str, *, other_namespace: bool) -> str:
    argv = [sys.executable, CHILD, "info", address, "2"]
    if other_namespace:
        done = run_in_loopback(argv, timeout_s=START_S)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_S, check=False)
    return done.stdout.strip() or done.stderr[-2000:]


@pytest.mark.slow  # two interpreters and a 2 s deadline: about 5 s
@pytest.mark.skipif(not loopback_available(), reason="needs unshare -rn (a loopback namespace)")
def test_a_client_in_another_loopback_namespace_cannot_reach_the_server(child):
    # the same address from a process in this network namespace reaches the server ...
    assert _server_info_from_child(child.address, other_namespace=False) == (
        "TABLES prio,queue,uniform"
    )
    # ... and from a second loopback-only namespace (its own 127.0.0.1) nothing listens there
    assert _server_info_from_child(child.address, other_namespace=True) == "DEADLINE"


def test_the_child_server_stops_when_its_stdin_closes(tmp_path):
    server = ChildServer()
    client = reverb.Client(server.address)
    assert "uniform" in client.server_info(timeout=CALL_S)
    assert server.stop() == 0
    with pytest.raises(reverb.errors.DeadlineExceededError):
        client.server_info(timeout=1)
