"""Tables: a window index, a sampler and the draw protocol over them (Reverb: ``Table``)."""

from recollect.table.draw import Draw
from recollect.table.table import Table

__all__ = ["Draw", "Table"]
