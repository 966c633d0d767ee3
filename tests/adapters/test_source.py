"""recollect.buffers.source.SampleSource is the readers' seam: a user's own class with its members
feeds the torch, JAX and tf.data adapters, and the library's sources implement it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import recollect as rc
from recollect.adapters.prefetch import as_source, prefetched
from recollect.buffers.source import Batches, SampleSource
from recollect.service import Server

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "t": rc.ArraySpec((), np.int64)}


class CountingSource:
    """A minimal source of its own: step ``t`` holds ``obs = [t, t, t]``; windows start at a
    counter, so batches are predictable. Implements SampleSource with no recollect base."""

    remote = False

    def __init__(self) -> None:
        self.data_spec = SPEC
        self.closed = False
        self.next_start = 0

    def time_steps(self, num_steps: int | None) -> int | None:
        return num_steps

    def sample(self, batch_size: int, num_steps: int | None = None) -> rc.Sample:
        start = np.arange(self.next_start, self.next_start + batch_size)
        self.next_start += batch_size
        t = start if num_steps is None else start[:, None] + np.arange(num_steps)
        obs = np.repeat(t[..., None], 3, axis=-1).astype(np.float32)
        return rc.Sample(
            {"obs": obs, "t": t.astype(np.int64)},
            start.astype(np.int64),
            np.full(batch_size, 0.5),
        )

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], rc.Sample]:
        sample = self.sample(batch_size, num_steps)
        return lambda: sample

    def stream(
        self,
        batch_size: int,
        num_steps: int | None,
        *,
        convert: Callable[[Any], Any] | None = None,
        prefetch: int = 2,
        num_threads: int = 1,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> Batches:
        return prefetched(
            self, batch_size, num_steps, convert=convert, prefetch=prefetch, num_threads=1
        )


def check_batch(obs: np.ndarray, t: np.ndarray, ids: np.ndarray, num_steps: int) -> None:
    """Windows of consecutive steps starting at the ids, as CountingSource makes them."""
    np.testing.assert_array_equal(t, ids[:, None] + np.arange(num_steps))
    np.testing.assert_array_equal(obs, np.repeat(t[..., None], 3, -1).astype(np.float32))


def test_the_library_sources_and_a_users_class_implement_sample_source() -> None:
    buf = rc.ReplayBuffer(SPEC, 40, 2)
    client = Server({"t": rc.ReplayBuffer(SPEC, 40, 2)}).client()
    for source in (buf.reader, client.table("t"), CountingSource()):
        assert isinstance(source, SampleSource), type(source).__name__
        assert as_source(source) is source
    assert as_source(buf) is buf.reader  # what the adapters read a ReplayBuffer through
    assert not buf.reader.remote and client.table("t").remote
    client.close()


def test_a_users_source_feeds_the_torch_adapter() -> None:
    torch = pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    source = CountingSource()
    dataset = ReplayDataset(source, batch_size=4, num_steps=3)
    it = iter(dataset)
    for _ in range(5):
        data, info = next(it)
        assert isinstance(data["obs"], torch.Tensor) and data["obs"].dtype == torch.float32
        check_batch(data["obs"].numpy(), data["t"].numpy(), info.ids.numpy(), 3)
    source.closed = True  # the source says it is closed: the iteration ends
    assert len(list(it)) <= 2  # at most the batches already prefetched
    dataset.close()


def test_a_users_source_feeds_the_jax_adapter() -> None:
    pytest.importorskip("jax")
    from recollect.adapters.jax import as_iterator

    with as_iterator(CountingSource(), batch_size=4, num_steps=2) as it:
        data, info = next(it)
    check_batch(np.asarray(data["obs"]), np.asarray(data["t"]), info.ids, 2)


@pytest.mark.parametrize("eager", [True, False])
def test_a_users_source_feeds_the_tf_data_adapter(eager: bool) -> None:
    tf = pytest.importorskip("tensorflow")
    from recollect.adapters.tf_data import as_dataset

    dataset = as_dataset(CountingSource(), sample_batch_size=4, num_steps=2)
    if eager:
        items, info = next(iter(dataset))
    else:
        items, info = tf.function(lambda: next(iter(dataset)))()
    assert items["obs"].shape == (4, 2, 3) and info.ids.dtype == tf.int64
    check_batch(items["obs"].numpy(), items["t"].numpy(), info.ids.numpy(), 2)


def test_a_users_source_is_refused_by_the_deterministic_pass_with_the_reason() -> None:
    pytest.importorskip("tensorflow")
    from recollect.adapters.tf_data import as_dataset

    with pytest.raises(rc.errors.InvalidArgumentError, match="got CountingSource"):
        as_dataset(CountingSource(), 4, 2, single_deterministic_pass=True)
