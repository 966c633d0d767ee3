"""``recollect inspect PATH``: what a checkpoint holds, with episode statistics and a plot.

Episodes are read from the top-level ``is_last`` leaf (and ``is_first`` when
present, RLDS layout). An episode counts as complete when its end is stored
and its start too (an ``is_first`` step, or, without ``is_first``, an earlier
``is_last`` in the same row). With ``is_first`` (RLDS) the final step holds
only the final observation, so an episode's length is its steps minus one.

PATH is a checkpoint directory (``buf.save``, ``manager.checkpoint``,
``recollect populate``) or the directory of a memmap buffer
(``ReplayBuffer(..., storage="memmap", directory=PATH)``), which is reopened
with the spec, capacity, num_envs and frame stacks in its ``manifest.json``
through a scratch directory of links, so inspecting never rewrites it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from recollect.cli.group import main
from recollect.errors import RecollectError

__all__ = ["episode_stats", "inspect_checkpoint"]


def _leaf(flat: Any, data: list[np.ndarray], path: str) -> np.ndarray | None:
    return data[flat.paths.index(path)] if path in flat.paths else None


def episode_stats(flat: Any, data: list[np.ndarray]) -> dict[str, Any]:
    """Complete episodes in ``data`` (leaves ``[num_envs, steps, ...]``, oldest first).

    Returns:
        dict with ``returns`` float64 ``[E]``, ``lengths`` int64 ``[E]`` and
        ``partial`` (episode parts whose start or end is not stored).
    """
    is_last = _leaf(flat, data, "is_last")
    terminated, truncated = _leaf(flat, data, "terminated"), _leaf(flat, data, "truncated")
    if is_last is None and terminated is not None and truncated is not None:  # TransitionBuffer
        is_last = terminated | truncated
    empty = {"returns": np.zeros(0), "lengths": np.zeros(0, np.int64), "partial": 0}
    if is_last is None or is_last.size == 0:
        return empty
    num_envs, steps = is_last.shape[:2]
    is_first = _leaf(flat, data, "is_first")
    reward = _leaf(flat, data, "reward")
    # Episode number of every step within its row: is_last closes an episode.
    ends_before = np.cumsum(is_last, axis=1) - is_last
    episode = ends_before + np.arange(num_envs)[:, None] * (steps + 1)
    ids, inverse = np.unique(episode.ravel(), return_inverse=True)
    has_end = np.bincount(inverse, weights=is_last.ravel()) > 0
    if is_first is not None:
        first_step = np.bincount(inverse, weights=is_first.ravel()) > 0
    else:
        first_step = (ids % (steps + 1)) > 0  # not the row's first (cut) part
    complete = has_end & first_step
    counts = np.bincount(inverse)
    lengths = counts - (1 if is_first is not None else 0)
    returns: np.ndarray = np.zeros(len(ids))
    if reward is not None and reward.ndim == 2:
        returns = np.bincount(inverse, weights=reward.astype(np.float64).ravel())
    return {
        "returns": returns[complete],
        "lengths": lengths[complete].astype(np.int64),
        "partial": int((~complete).sum()),
    }


def _describe(values: np.ndarray) -> str:
    if not len(values):
        return "n/a"
    lo, hi = (
        (f"{values.min()}", f"{values.max()}")
        if values.dtype.kind in "iu"
        else (f"{values.min():.2f}", f"{values.max():.2f}")
    )
    return f"mean {values.mean():.2f}  std {values.std():.2f}  min {lo}  max {hi}"


def _spec_table(flat: Any) -> str:
    rows = [("leaf", "shape", "dtype")]
    rows += [
        (p, str(s), str(d)) for p, s, d in zip(flat.paths, flat.shapes, flat.dtypes, strict=True)
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _plot(stats: dict[str, Any], actions: np.ndarray | None, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = [
        (axes[0], stats["returns"], "episode return"),
        (axes[1], stats["lengths"], "episode length"),
    ]
    for ax, values, title in panels:
        if len(values):
            ax.hist(values, bins=min(30, max(5, len(values) // 3)))
        ax.set_title(f"{title} ({len(values)} episodes)")
    ax = axes[2]
    if actions is not None and actions.size:
        if actions.dtype.kind in "iub" and actions.ndim == 1:
            values, counts = np.unique(actions, return_counts=True)
            ax.bar(values.astype(str), counts)
        else:
            ax.hist(actions.astype(np.float64).ravel(), bins=30)
    ax.set_title("actions")
    fig.tight_layout()
    fig.savefig(output, dpi=80)
    plt.close(fig)


def _memmap_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of a memmap buffer directory, or None when ``path`` is something else."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("storage") == "memmap" else None


def _open_memmap(path: Path) -> Any:
    """The memmap buffer at ``path`` as a RAM buffer over copy-on-write mappings of its
    files: nothing in ``path`` is written, links are never followed.

    Raises:
        CheckpointError: the directory was written after its last flush (its counters
            do not match its data), or is damaged.
    """
    from recollect.buffers.memmap_state import DIRTY
    from recollect.buffers.replay_buffer import ReplayBuffer
    from recollect.errors import CheckpointError
    from recollect.state.files import read_state

    if (path / DIRTY).exists():
        raise CheckpointError(
            f"memmap directory {path} was written after its last flush(); its counters no "
            "longer match the data. Reopen it with recover=True (in Python) to inspect it."
        )
    saved = read_state(path, resolve=False, copy_on_write=True)
    buffer = ReplayBuffer.from_config(saved.config, force=True)  # RAM untouched: mapped below
    buffer.load_state_dict(saved.state, allow_map=True)
    return buffer


def inspect_checkpoint(path: str, output: Path | None) -> str:
    """Loads the checkpoint (or memmap directory) at ``path`` and returns the report.

    Writes the plot to ``output`` unless it is None.
    """
    from recollect.buffers.checkpoint import load_buffer

    manifest = _memmap_manifest(Path(path))
    if manifest is None:
        return _report(path, load_buffer(path, mmap=True), None, output)
    return _report(path, _open_memmap(Path(path)), manifest, output)


def _report(path: str, loaded: Any, memmap: dict[str, Any] | None, output: Path | None) -> str:
    buffer = getattr(loaded, "replay_buffer", loaded) if loaded.num_frames() else loaded
    if not hasattr(buffer, "gather_all"):  # an empty TransitionBuffer
        return f"{path}: empty {type(loaded).__name__} (capacity {loaded.capacity})"
    flat = buffer.writer.flat_spec
    data = flat.treedef.flatten_up_to(buffer.gather_all())
    stats = episode_stats(flat, data)
    actions = _leaf(flat, data, "action")
    is_last = _leaf(flat, data, "is_last")
    if actions is not None and is_last is not None and "is_first" in flat.paths:
        actions = actions[~is_last]  # RLDS final steps carry no action
    elif actions is not None:
        actions = actions.reshape(-1, *actions.shape[2:])
    if output is not None:
        _plot(stats, actions, output)
    kind = type(loaded).__name__ if memmap is None else f"memmap {type(loaded).__name__}"
    sampler = type(buffer.reader.sampler).__name__
    rows = f"{buffer.num_envs} env row{'s' if buffer.num_envs != 1 else ''}"
    lines = [
        f"checkpoint   {path}",
        f"kind         {kind}",
        f"capacity     {buffer.capacity} ({rows})",
        f"steps        {buffer.num_frames()}",
        f"episodes     {len(stats['lengths'])} complete, {stats['partial']} partial",
        f"return       {_describe(stats['returns'])}",
        f"length       {_describe(stats['lengths'])}",
        f"sampler      {sampler}",
        *(buffer.info().lines() if hasattr(buffer, "info") else []),
        "",
        _spec_table(flat),
    ]
    if output is not None:
        lines += ["", f"wrote {output}"]
    return "\n".join(lines)


@main.command(name="inspect")
@click.argument("path", type=click.Path())
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default="inspect.png",
    show_default=True,
    help="where to write the plot.",
)
@click.option("--no-plot", is_flag=True, help="skip the plot.")
def inspect_command(path: str, output: str, no_plot: bool) -> None:
    """Print what the checkpoint or memmap buffer directory at PATH holds; plot its episodes."""
    try:
        report = inspect_checkpoint(path, None if no_plot else Path(output))
    except RecollectError as err:
        raise click.ClickException(str(err)) from err
    except OSError as err:
        raise click.ClickException(f"{path}: {err.strerror or err}") from err
    click.echo(report)
