"""Frame stacks: storing each image frame once and stacking it on read.

``frame_stack`` describes a stack (:class:`~recollect.FrameStack`), ``frame_layout`` the ring of
frames per env row, ``frame_compressed`` its compressed variant and ``frame_store`` the storage
over them. The public names are exported by :mod:`recollect.storage`.
"""
