"""What the client and shard sides of the service share, and what a transport carries.

* :mod:`~recollect.service.wire.requests`: one frozen dataclass per shard operation,
  the only description of it (its fields are the arguments; :meth:`Request.apply`
  calls the shard's method of the same name).
* :mod:`~recollect.service.wire.replies`: what a shard sends back.
* :mod:`~recollect.service.wire.protocol`: :class:`ShardProtocol`, the shard's contract.
* :mod:`~recollect.service.wire.endpoint`: :class:`Endpoint` (send/result: what a
  transport implements), the in-process :class:`LocalEndpoint`, :class:`Raised`.
* :mod:`~recollect.service.wire.codec`: requests and replies as header values plus
  raw array buffers, for transports between processes (no pickle).
* :mod:`~recollect.service.wire.layout`: where a service checkpoint keeps each shard.
"""
