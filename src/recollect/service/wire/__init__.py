"""What the client and shard sides of the service share, and what a transport carries.

* :mod:`~recollect.service.wire.requests`: one frozen dataclass per shard operation,
  the only description of it (its fields are the arguments; :meth:`Request.apply`
  calls the shard's method of the same name).
* :mod:`~recollect.service.wire.replies`: what a shard sends back.
* :mod:`~recollect.service.wire.protocol`: :class:`ShardProtocol`, the shard's contract.
* :mod:`~recollect.service.wire.endpoint`: :class:`Endpoint` (send/result: what a
  transport implements), the in-process :class:`LocalEndpoint`, :class:`Raised`,
  :func:`~recollect.service.wire.endpoint.results` (several calls under one deadline).
* :mod:`~recollect.service.wire.codec`: requests and replies as header values plus
  raw array buffers, for transports between processes (no pickle).
* :mod:`~recollect.service.wire.layout`: where a service checkpoint keeps each shard.

How a transport plugs in (``recollect.ray`` does this twice: Ray calls and the
same-node Unix socket; a gRPC transport does the same):

* the shard's end hosts a :class:`~recollect.service.shard.Shard` (opened with
  :func:`~recollect.service.shard.open_shard`) and answers each message with
  ``codec.respond(shard, message)`` (the request decoded, applied, its answer or
  error encoded; it never raises);
* the caller's end implements :class:`Endpoint`: ``send(request)`` carries
  ``codec.packed(request)`` (or :func:`~recollect.service.wire.codec.encode`'s
  header and buffers, for a transport with fields of its own) and returns a handle;
  ``result(handle, timeout)`` returns ``codec.answer(reply)``, which raises what the
  shard raised (``ShardNoAnswerError`` once ``timeout`` passed; ``timeout=0`` asks
  whether the call finished). A request's
  ``stream`` (a writer's chunks) may take a connection of its own; its ``seq``
  keeps the order on the shard whatever carried it;
* a :class:`~recollect.service.client.Client` is built from ``{table: [Endpoint
  per shard]}``; nothing else of the client or the shard changes.
"""
