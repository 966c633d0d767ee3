"""TableHandle: one served table as a sample source (what ``client.table(name)`` returns)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recollect.buffers import Sample
from recollect.service.client.stream import SampleStream
from recollect.service.client.writer import Writer
from recollect.table import TableInfo

__all__ = ["TableHandle"]


class TableHandle:
    """One served table as a sample source: what ``client.table(name)`` returns.

    It implements :class:`~recollect.buffers.source.SampleSource`, so the dataset
    adapters (``recollect.torch.ReplayDataset``, ``recollect.jax.as_iterator``,
    ``recollect.tf_data.as_dataset``) and the manager read it as they read a
    local buffer; its :meth:`stream` keeps up to ``max_in_flight`` sample
    requests outstanding.

    Args:
        client: the :class:`~recollect.service.Client` (typed ``Any``: the client
            module imports this one).
        name: the table's name.
    """

    #: Samples travel over a transport: readers read through :meth:`stream`.
    remote = True

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    @property
    def data_spec(self) -> Any:
        """The table's spec."""
        return self.client.data_spec(self.name)

    @property
    def sequence_length(self) -> int | None:
        """The table's fixed window length, or None."""
        return self.client.describe(self.name).sequence_length

    @property
    def closed(self) -> bool:
        """Whether the client is closed (the adapters' iterators then end)."""
        return self.client.closed

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> Sample:
        """:meth:`Client.sample` of this table."""
        return self.client.sample(self.name, batch_size, num_steps, timeout, **options)

    def time_steps(self, num_steps: int | None) -> int | None:
        """``num_steps``, or for None the table's fixed ``sequence_length`` when it is > 1.

        The server checks ``num_steps`` against the table when it samples.
        """
        if num_steps is not None:
            return num_steps
        fixed = self.sequence_length
        return fixed if fixed is not None and fixed > 1 else None

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Sample]:
        """Samples now (one request); returns ``finish()``, which returns the sample."""
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
    ) -> SampleStream:
        """A :class:`~recollect.service.SampleStream` of ``convert(sample)`` batches.

        Its ``max_in_flight`` request threads are the one thread layer: the
        requests in flight are the read-ahead, so ``prefetch`` and
        ``num_threads`` (a local buffer's) are ignored; ``convert`` runs on
        the request threads.

        Raises:
            InvalidArgumentError: ``max_in_flight`` or ``batches_per_request`` < 1.
        """
        del prefetch, num_threads  # the requests in flight are the read-ahead
        return SampleStream(
            self,
            batch_size,
            num_steps,
            max_in_flight=max_in_flight,
            batches_per_request=batches_per_request,
            convert=convert,
        )

    def num_frames(self) -> int:
        """Steps the table stores (over all shards)."""
        return int(self.info().num_stored)

    def clear(self) -> None:
        """Forgets every stored step of the table (:meth:`Client.reset`)."""
        self.client.reset(self.name)

    def sample_batches(
        self,
        batch_size: int,
        num_batches: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> list[Sample]:
        """:meth:`Client.sample_batches` of this table."""
        return self.client.sample_batches(
            self.name, batch_size, num_batches, num_steps, timeout, **options
        )

    def update_priorities(self, ids: Any, priorities: Any, *, wait: bool = False) -> int | None:
        """:meth:`Client.update_priorities` of this table."""
        return self.client.update_priorities(self.name, ids, priorities, wait=wait)

    def delete(self, ids: Any) -> int:
        """:meth:`Client.delete` of this table."""
        return self.client.delete(self.name, ids)

    def writer(self, num_envs: int, **kwargs: Any) -> Writer:
        """:meth:`Client.writer` of this table."""
        return self.client.writer(self.name, num_envs, **kwargs)

    def info(self) -> TableInfo:
        """:meth:`Client.info` of this table."""
        return self.client.info(self.name)

    def __repr__(self) -> str:
        return f"TableHandle({self.name!r}, {self.client!r})"
