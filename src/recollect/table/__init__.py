"""Tables: a window index, a sampler and the draw protocol over them (Reverb: ``Table``)."""

from recollect.table.draw import Draw
from recollect.table.info import TableInfo
from recollect.table.rate_limiters import MinSize, Queue, RateLimiter, SampleToInsertRatio, Stack
from recollect.table.table import Table

__all__ = [
    "Draw",
    "MinSize",
    "Queue",
    "RateLimiter",
    "SampleToInsertRatio",
    "Stack",
    "Table",
    "TableInfo",
]
