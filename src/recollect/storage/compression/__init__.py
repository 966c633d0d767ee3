"""Compressed storage: codecs (zlib, lz4, zstd with trained dictionaries) and the compressed slots.

``codecs``/``codec_base``/``zstd_*`` encode and decode byte blocks; ``compressed`` and
``compressed_parts`` keep the encoded steps of a leaf in a byte arena; ``compressed_storage``
is the storage over them. The public names are exported by :mod:`recollect.storage`.
"""
