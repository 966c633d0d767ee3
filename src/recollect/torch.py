"""PyTorch adapter: turns sample nests into ``torch.Tensor`` nests (torch imported lazily).

On CPU the conversion is zero-copy (``torch.from_numpy`` shares memory with
the sampled numpy arrays, which the buffer never touches again). With a
``device`` the tensors are copied there, from pinned memory and non-blocking
when ``pin_memory=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree
import torch

__all__ = ["as_tensors"]


def _to_tensor(x: Any, device: torch.device | None, pin_memory: bool) -> Any:
    if not isinstance(x, np.ndarray | np.generic):
        return x
    tensor = torch.from_numpy(np.ascontiguousarray(x) if x.dtype != np.bool_ else np.asarray(x))
    if device is None or device.type == "cpu":
        return tensor
    if pin_memory:
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=pin_memory)


def as_tensors(tree: Any, device: str | torch.device | None = None, pin_memory: bool = False) -> Any:
    """Converts every numpy leaf of ``tree`` into a ``torch.Tensor``.

    Args:
        tree: a nest of numpy arrays (e.g. ``Sample.data``) or a dataclass
            sample (its array fields are converted).
        device: target device (``"cuda"``, ``"cpu"``, ``torch.device``); None keeps CPU.
        pin_memory: copy through pinned memory, non-blocking (only with an accelerator).

    Returns:
        The same structure with tensors; dtypes follow numpy (float32 ->
        ``torch.float32``, bool -> ``torch.bool``, uint8 -> ``torch.uint8``).
    """
    dev = torch.device(device) if device is not None else None
    import dataclasses

    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = {f.name: getattr(tree, f.name) for f in dataclasses.fields(tree)}
        return type(tree)(**{k: as_tensors(v, dev, pin_memory) for k, v in fields.items()})
    return optree.tree_map(lambda x: _to_tensor(x, dev, pin_memory), tree, none_is_leaf=False)
