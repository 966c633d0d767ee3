"""The shard side of the service: what runs where a table's shard lives.

:class:`Shard` (one part of a served table plus its writers' row leases, the one
implementation of :class:`~recollect.service.wire.protocol.ShardProtocol`), its
leases and chunk order (:mod:`~recollect.service.shard.lease`), its insert counters
on disk (:mod:`~recollect.service.shard.counters`), how a table's configuration is
split into shards (:mod:`~recollect.service.shard.split`) and how a shard is opened
from a checkpoint (:mod:`~recollect.service.shard.open`). It imports only the wire
layer of the service (:mod:`recollect.service.wire`), never the client side.
"""

from recollect.service.shard.lease import ChunkOrder, Lease
from recollect.service.shard.open import check_tables, open_shard
from recollect.service.shard.shard import Shard
from recollect.service.shard.split import SHARDABLE_SAMPLERS, shard_config
from recollect.service.wire.layout import shard_path
from recollect.service.wire.replies import ShardDescription

__all__ = [
    "SHARDABLE_SAMPLERS",
    "ChunkOrder",
    "Lease",
    "Shard",
    "ShardDescription",
    "check_tables",
    "open_shard",
    "shard_config",
    "shard_path",
]
