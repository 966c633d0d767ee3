"""The replay service: tables served to many writers and learners.

``Server`` serves tables in-process (threads); ``recollect.ray.serve`` serves
them as Ray actors, split into shards. Both hand out the same
:class:`Client`: ``writer(table, num_envs)`` for actors, ``sample`` and
``update_priorities`` for learners, ``info``, ``checkpoint``, ``reset``.

Laid out by side: :mod:`recollect.service.client` (what a writer's or learner's
process runs), :mod:`recollect.service.shard` (what runs where a shard lives) and
:mod:`recollect.service.wire` (the requests, replies and encoding both share; the
only modules a transport needs). :mod:`recollect.service.server` joins the two
sides in one process.
"""

from recollect.service.client import Client, SampleStream, TableHandle, Writer
from recollect.service.server import Server
from recollect.service.shard import Shard, ShardDescription
from recollect.service.wire.endpoint import Endpoint, LocalEndpoint, Raised

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
