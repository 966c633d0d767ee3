"""Short, readable single-file examples built on recollect (they import torch and gymnasium)."""
