"""The client side of the service: what a writer's or learner's process runs.

:class:`Client` (one interface to tables served in-process or on Ray) and its
collaborators: :class:`Writer` (a writer's chunks, sent as flat, already-cast
leaves), :class:`TableHandle` and :class:`SampleStream` (a served table as a
sample source), routing of ids to shards, batch splitting and reassembly, held-back
priority updates, writer placement and the service checkpoint. It imports only the
wire layer of the service (:mod:`recollect.service.wire`), never the shard side.
"""

from recollect.service.client.assemble import merge_infos
from recollect.service.client.client import Client
from recollect.service.client.stream import SampleStream
from recollect.service.client.table_handle import TableHandle
from recollect.service.client.writer import Writer
from recollect.service.wire.layout import MANIFEST

__all__ = ["MANIFEST", "Client", "SampleStream", "TableHandle", "Writer", "merge_infos"]
