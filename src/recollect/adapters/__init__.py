"""Framework adapters: readers that turn a :class:`~recollect.SampleSource` into framework input.

``torch`` (a ``torch.utils.data.IterableDataset``), ``tf_data`` (``tf.data.Dataset``), ``jax``
(an iterator of device arrays), and ``prefetch`` (the framework-free concurrent reads they
share). Each module imports its framework when imported; this package imports none. The
public paths are ``recollect.torch``, ``recollect.tf_data``, ``recollect.jax`` and
``recollect.prefetch`` (aliases of these modules, see :mod:`recollect`).
"""
