"""The gRPC transport end to end on loopback: values, errors, refusals, tokens, processes."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import secrets
import socket
import threading
import time

import numpy as np
import pytest
from grpc_targets import Target, TargetError, TwoArgumentError, call_in_child, serve_in_child

from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeError
from recollect.grpc import (
    TOKEN_ENV,
    Channel,
    DeadlineExceededError,
    GrpcChannel,
    RemoteError,
    StreamChannel,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
    UnknownMethodError,
    connect,
    serve,
)
from recollect.grpc import client as grpc_client
from recollect.grpc.options import load_grpc

try:
    load_grpc()
except ImportError:
    pytest.skip("grpcio is not installed (extra recollect[reverb])", allow_module_level=True)

TIMEOUT = 30.0  # seconds: a guard against hangs, never a timing assertion
TOKEN = secrets.token_urlsafe(24)


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


@pytest.fixture
def target():
    return Target()


@pytest.fixture
def server(target):
    with serve(target) as running:
        yield running


@pytest.fixture
def channel(server):
    with connect(server.address) as opened:
        yield opened


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_channel_is_a_stream_channel(channel):
    assert isinstance(channel, Channel) and isinstance(channel, StreamChannel)


def test_every_dtype_and_nest_round_trips_through_a_server(channel):
    from test_grpc_codec import DTYPES, assert_same, sample_array

    args = {
        "arrays": {str(np.dtype(d)): sample_array(d) for d in DTYPES},
        "scalars": [np.float16(1.5), np.int64(-3), np.bool_(True), np.str_("ab")],
        "plain": (None, True, 2**70, 0.25, float("nan"), "text", b"\x00\xff"),
        "empty": [(), {}, np.zeros((0, 3), np.float32)],
    }
    assert_same(channel.call("echo", args, timeout=TIMEOUT), args)


def test_a_localhost_address_reaches_a_loopback_server(server):
    assert server.address == f"127.0.0.1:{server.port}"
    with connect(f"localhost:{server.port}") as channel:
        assert channel.call("echo", {"x": "ok"}, timeout=TIMEOUT) == {"x": "ok"}


def test_a_100_mb_array_round_trips(channel):
    big = np.random.default_rng(0).integers(0, 255, size=100 * 2**20, dtype=np.uint8)
    got = channel.call("echo", {"big": big}, timeout=120.0)["big"]
    assert got.dtype == np.uint8 and got.shape == big.shape
    assert np.array_equal(got, big)


def test_arguments_over_the_message_limit_are_refused_before_sending(channel, monkeypatch):
    monkeypatch.setattr(grpc_client, "MAX_MESSAGE_BYTES", 1000)
    with pytest.raises(InvalidArgumentError, match=r"echo\(\) make a \d+-byte message, over"):
        channel.call("echo", {"a": np.zeros(1000)}, timeout=TIMEOUT)


def test_a_registered_recollect_error_comes_back_with_its_class_and_message(channel):
    with pytest.raises(ShapeError, match=r"^leaf 'obs' has shape \(3,\); expected \(4,\)$"):
        channel.call("shape_error", {"message": "leaf 'obs' has shape (3,); expected (4,)"})


def test_a_class_registered_by_another_package_comes_back_as_that_class(channel):
    with pytest.raises(TargetError, match=r"^from the target$"):
        channel.call("target_error", {"message": "from the target"}, timeout=TIMEOUT)
    with pytest.raises(TwoArgumentError, match=r"^odd constructor \(code 7\)$"):
        channel.call("two_argument_error", {}, timeout=TIMEOUT)


def test_an_unregistered_error_comes_back_as_remote_error_naming_its_class(channel):
    with pytest.raises(RemoteError, match=r"builtins\.KeyError raised by key_error\(\)") as info:
        channel.call("key_error", {}, timeout=TIMEOUT)
    assert info.value.remote_type == "builtins.KeyError"
    assert info.value.remote_message == "'missing-key'"
    with pytest.raises(RemoteError, match=r"builtins\.TypeError.*unexpected keyword"):
        channel.call("noop", {"extra": 1}, timeout=TIMEOUT)


def test_a_result_the_transport_cannot_carry_raises_naming_its_path(channel):
    with pytest.raises(InvalidArgumentTypeError, match=r"builtins\.object at '/bad/0'"):
        channel.call("unsendable", {}, timeout=TIMEOUT)


@pytest.mark.parametrize("name", ["_private", "__init__", "__class__", "hidden", "missing"])
def test_private_unknown_and_non_callable_names_are_refused(channel, name):
    with pytest.raises(UnknownMethodError, match=rf"no public method '{name}'"):
        channel.call(name, {}, timeout=TIMEOUT)


def test_serve_methods_limits_what_is_served(target):
    with serve(target, methods=["noop"]) as server, connect(server.address) as channel:
        assert channel.call("noop", {}, timeout=TIMEOUT) is None
        with pytest.raises(UnknownMethodError, match=r"no public method 'echo'"):
            channel.call("echo", {}, timeout=TIMEOUT)


def test_bad_call_arguments_are_refused_on_the_client(channel):
    with pytest.raises(InvalidArgumentTypeError, match=r"args must be a dict .* got list"):
        channel.call("echo", [1], timeout=TIMEOUT)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"timeout must be None or seconds >= 0"):
        channel.call("echo", {}, timeout=-1)


def test_a_stream_yields_each_item_then_raises_the_targets_error(channel):
    items = list(channel.stream("count", {"n": 4}, timeout=TIMEOUT))
    assert [item.tolist() for item in items] == [[], [1], [2, 2], [3, 3, 3]]
    got = []
    with pytest.raises(ShapeError, match=r"^failed after 3 items$"):
        for item in channel.stream("count_then_fail", {"n": 3}, timeout=TIMEOUT):
            got.append(item)
    assert got == [0, 1, 2]


def test_a_call_slower_than_its_timeout_raises_deadline_exceeded(channel):
    with pytest.raises(DeadlineExceededError, match=r"sleep\(\) .* did not complete within"):
        channel.call("sleep", {"seconds": 2.0}, timeout=0.2)


def test_a_call_where_nothing_listens_raises_deadline_exceeded_within_its_timeout():
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(
        DeadlineExceededError, match=rf"within timeout=1.0 s: .*nothing listens at {address}"
    ):
        connect(address).call("noop", {}, timeout=1.0)
    assert time.monotonic() - start < TIMEOUT


def test_without_wait_for_ready_nothing_listening_is_unavailable():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(UnavailableError, match=r"the server is unreachable or stopped"):
        connect(address, wait_for_ready=False).call("noop", {}, timeout=TIMEOUT)


def test_a_client_waits_for_a_server_that_starts_later(target):
    port = free_port()
    channel = connect(f"127.0.0.1:{port}")
    result: list[object] = []
    caller = threading.Thread(
        target=lambda: result.append(channel.call("echo", {"x": 1}, timeout=TIMEOUT))
    )
    caller.start()
    time.sleep(0.3)
    with serve(target, port=port):
        caller.join(TIMEOUT)
    assert result == [{"x": 1}]


def test_a_stopped_server_is_unavailable_and_its_port_in_use_is_refused(target):
    server = serve(target)
    with pytest.raises(TransportError, match=rf"cannot serve on 127.0.0.1:{server.port}"):
        serve(target, port=server.port)
    server.stop()
    server.stop()  # twice: no-op
    with pytest.raises(UnavailableError):
        connect(server.address, wait_for_ready=False).call("noop", {}, timeout=TIMEOUT)


def test_sixteen_threads_share_one_channel(channel, target):
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(10):
                a = np.full((64, 3), i * 100 + j, dtype=np.int64)
                got = channel.call("add", {"a": a, "b": np.ones(3, np.int64)}, timeout=TIMEOUT)
                assert np.array_equal(got, a + 1)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)


# --- tokens -------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.org"])
def test_binding_beyond_loopback_needs_a_token(target, host):
    with pytest.raises(InvalidArgumentError, match=rf"serving on host='{host}' needs a token"):
        serve(target, host=host)


@pytest.mark.parametrize(
    ("token", "error", "match"),
    [
        ("short", InvalidArgumentError, r"at least 16 printable ASCII characters; got 5"),
        ("é" * 20, InvalidArgumentError, r"got 20 characters \(not ASCII\)"),
        (b"x" * 20, InvalidArgumentTypeError, r"token must be a str; got bytes"),
    ],
)
def test_weak_or_malformed_tokens_are_refused(target, token, error, match):
    with pytest.raises(error, match=match):
        serve(target, host="0.0.0.0", token=token)
    with pytest.raises(error, match=match):
        connect("127.0.0.1:1", token=token)


@pytest.mark.skipif(
    not os.environ.get("RECOLLECT_LOOPBACK_NETNS"),
    reason="binds all interfaces: only inside the suite's loopback-only namespace",
)
def test_with_a_token_a_server_binds_all_interfaces(target):
    with serve(target, host="0.0.0.0", token=TOKEN) as server:
        assert server.address == f"0.0.0.0:{server.port}"
        channel = connect(f"127.0.0.1:{server.port}", token=TOKEN)
        assert channel.call("echo", {"x": 1}, timeout=TIMEOUT) == {"x": 1}


@pytest.fixture
def token_server(target):
    with serve(target, token=TOKEN) as running:
        yield running


@pytest.mark.parametrize("sent", [None, "a-wrong-token-of-enough-length"])
@pytest.mark.parametrize("method", ["echo", "_private", "missing"])
def test_a_missing_or_wrong_token_is_unauthenticated(token_server, target, sent, method):
    channel = connect(token_server.address, token=sent)
    with pytest.raises(UnauthenticatedError, match=rf"this server needs a token.*\${TOKEN_ENV}"):
        channel.call(method, {}, timeout=TIMEOUT)
    assert target.calls == 0


def test_the_right_token_from_the_argument_or_the_environment_is_accepted(
    token_server, monkeypatch
):
    assert connect(token_server.address, token=TOKEN).call("echo", {"x": 1}) == {"x": 1}
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert connect(token_server.address).call("echo", {"x": 2}) == {"x": 2}


def test_a_pickled_channel_reconnects_and_keeps_its_token(token_server):
    channel = connect(token_server.address, token=TOKEN)
    assert channel.call("echo", {"x": 1}, timeout=TIMEOUT) == {"x": 1}
    copy = pickle.loads(pickle.dumps(channel))
    assert isinstance(copy, GrpcChannel) and copy.address == token_server.address
    assert copy.call("echo", {"x": 2}, timeout=TIMEOUT) == {"x": 2}
    assert TOKEN not in repr(copy)


# --- other processes ----------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_server_in_a_spawned_process_is_reached_by_address(token):
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=serve_in_child, args=(child, token), daemon=True)
    process.start()
    try:
        assert parent.poll(120), "the child did not start serving"
        channel = connect(parent.recv(), token=token)
        array = np.arange(12, dtype=np.float16).reshape(3, 4)
        got = channel.call("echo", {"a": array, "s": "x"}, timeout=TIMEOUT)
        assert got["s"] == "x" and got["a"].dtype == np.float16
        assert np.array_equal(got["a"], array)
        with pytest.raises(TargetError, match=r"^in the child$"):
            channel.call("target_error", {"message": "in the child"}, timeout=TIMEOUT)
        parent.send("stop")
        process.join(TIMEOUT)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()


def test_a_channel_passed_to_a_spawned_process_calls_from_there(token_server):
    channel = connect(token_server.address, token=TOKEN)
    assert channel.call("noop", {}, timeout=TIMEOUT) is None  # opened in this process
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=call_in_child, args=(channel, child), daemon=True)
    process.start()
    try:
        assert parent.poll(120), "the child's call did not return"
        assert parent.recv() == {"where": "child"}
        process.join(TIMEOUT)
    finally:
        if process.is_alive():
            process.kill()


def _call_in_forked_child(channel: GrpcChannel, conn) -> None:
    try:
        conn.send(channel.call("echo", {"pid": os.getpid()}, timeout=TIMEOUT)["pid"])
    except BaseException as err:
        conn.send(repr(err))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork (POSIX)"
)
def test_a_forked_child_opens_its_own_connection(channel):
    assert channel.call("echo", {"x": 0}, timeout=TIMEOUT) == {"x": 0}  # opened here
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_call_in_forked_child, args=(channel, child))
    process.start()
    try:
        assert parent.poll(TIMEOUT), "the forked child's call did not return"
        assert parent.recv() == process.pid
        process.join(TIMEOUT)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()
    assert channel.call("echo", {"x": 1}, timeout=TIMEOUT) == {"x": 1}  # the parent's still works
