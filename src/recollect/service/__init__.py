"""The replay service: tables served to many writers and learners.

``Server`` serves tables in-process (threads); ``recollect.ray.serve`` serves
them as Ray actors, split into shards. Both hand out the same
:class:`Client`: ``writer(table, num_envs)`` for actors, ``sample`` and
``update_priorities`` for learners, ``info``, ``checkpoint``, ``reset``.
"""

from recollect.service.client import Client, TableHandle
from recollect.service.endpoint import Endpoint, LocalEndpoint, Raised
from recollect.service.server import Server
from recollect.service.shard import Shard, ShardDescription
from recollect.service.stream import SampleStream
from recollect.service.writer import Writer

__all__ = [
    "Client",
    "Endpoint",
    "LocalEndpoint",
    "Raised",
    "SampleStream",
    "Server",
    "Shard",
    "ShardDescription",
    "TableHandle",
    "Writer",
]
