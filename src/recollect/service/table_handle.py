"""TableHandle: one served table as a sample source (what ``client.table(name)`` returns)."""

from __future__ import annotations

from typing import Any

from recollect.buffers import Sample
from recollect.service.writer import Writer
from recollect.table import TableInfo

__all__ = ["TableHandle"]


class TableHandle:
    """One served table as a sample source: what ``client.table(name)`` returns.

    The dataset adapters (``recollect.torch.ReplayDataset``,
    ``recollect.jax.as_iterator``, ``recollect.tf_data.as_dataset``) accept it
    and keep up to ``max_in_flight`` sample requests outstanding.

    Args:
        client: the :class:`~recollect.service.Client` (typed ``Any``: the client
            module imports this one).
        name: the table's name.
    """

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
