"""The numeric dtypes Reverb carries (its 18 are these 14, bytes and str), shared by the
tests of recollect.reverb and of its gRPC transport."""

import numpy as np

NUMERIC_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]
