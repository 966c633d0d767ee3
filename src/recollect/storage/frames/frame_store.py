"""Frame-stack storage: image observations stored once per frame, stacks rebuilt at sample time.

An observation leaf that holds ``stack_size`` stacked frames (gymnasium's
``FrameStackObservation``, Atari ``[84, 84, 4]``) repeats every frame
``stack_size`` times across consecutive steps. The frame store keeps only the
newest frame of each step and rebuilds a stack from the frames of the same env
row with vectorized index arithmetic: position ``p`` of the stack of step
``t`` is the frame of step ``t - (stack_size - 1 - p)``.

At an episode start the stack has no history; the missing positions are
filled exactly as gymnasium 1.x ``FrameStackObservation`` fills them
(``padding_type``): ``"reset"`` repeats the episode's first frame, ``"zero"``
uses zeros, a custom frame uses that frame. A sampled stack therefore equals,
bit for bit, the observation the env returned.

Bookkeeping per stored step is one uint8 ``history`` = ``min(t - episode
start, 255)`` clamped at ``max stack_size - 1``. An episode starts at a step with
``is_first`` (when the spec has that top-level bool leaf), at the step after an
episode's last step (``is_last``, or the buffer's ``episode_end``), and at the very
first write. Each row's frame ring holds
``max_length + stack_size - 1`` frames, so the oldest stored step of a row
still finds its ``stack_size - 1`` earlier frames: the buffer keeps behaving as
``capacity`` steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.specs import ArraySpec, FlatSpec
from recollect.storage.compression.codecs import Codec
from recollect.storage.episode_ends import EpisodeEnd
from recollect.storage.frames.frame_compressed import CompressedFrameRing
from recollect.storage.frames.frame_layout import FrameRing, lane_word, ring_length
from recollect.storage.frames.frame_stack import FrameStack, resolve_frame_stacks
from recollect.storage.gather import Gatherer
from recollect.storage.ring import RingStorage

__all__ = [
    "FrameStack",
    "FrameStackStorage",
    "frame_store_nbytes",
    "resolve_frame_stacks",
    "stack_ring",
]

Allocator = Callable[[str, tuple[int, ...], np.dtype], np.ndarray]


def _zeros(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    del name
    return np.zeros(shape, dtype)


@dataclasses.dataclass
class _Leaf:
    """One frame-stacked leaf: its stack options and frame ring."""

    stack: FrameStack
    frames: FrameRing | CompressedFrameRing


def _ring(flat_spec: FlatSpec, max_length: int, stacks: dict[int, FrameStack]) -> int:
    lanes = []
    for i, stack in stacks.items():
        axis = stack.axis % len(flat_spec.shapes[i])
        lane = lane_word(flat_spec.shapes[i], flat_spec.dtypes[i], axis)
        if stack.contiguous and lane is not None:
            lanes.append(stack.stack_size)
    return ring_length(max_length, [s.stack_size for s in stacks.values()], lanes)


class FrameStackStorage:
    """Ring storage where frame-stacked leaves keep only the newest frame of each step.

    Implements :class:`~recollect.storage.base.Storage`; ``write`` and
    ``gather`` need the steps' row ``times`` (a frame ring is longer than the
    slot ring, and stacks reach back ``stack_size - 1`` times). ``gather``
    returns rebuilt stacks. Plain leaves live in an inner ring (frame leaves
    there are zero-size placeholders).

    Args:
        flat_spec: the flattened spec.
        num_envs, max_length: ring geometry of the buffer.
        stacks: ``{leaf index: FrameStack}``.
        is_first: leaf index of the top-level bool ``is_first`` leaf (episode starts), or None.
        episode_end: the leaf marking episode ends (the next step starts one), or None.
        inner: constructor ``(flat_spec, num_envs, max_length, gatherer)`` of
            the plain-leaf ring (``RingStorage`` or a memmap partial).
        allocate: ``(name, shape, dtype) -> array`` for the frame rings.
        gatherer: shared by the inner ring and the frame rings.
        codecs: ``{leaf index: Codec}``: those leaves keep each frame compressed
            (:class:`~recollect.storage.frames.frame_compressed.CompressedFrameRing`).
        make_slots: builds each compressed ring's store (default: in RAM; memmap
            storage passes :func:`~recollect.storage.compressed_memmap.disk_slots_factory`).
    """

    def __init__(
        self,
        flat_spec: FlatSpec,
        num_envs: int,
        max_length: int,
        stacks: dict[int, FrameStack],
        is_first: int | None,
        episode_end: EpisodeEnd | None,
        inner: Callable[..., Any] = RingStorage,
        allocate: Allocator = _zeros,
        gatherer: Gatherer | None = None,
        codecs: dict[int, Codec] | None = None,
        make_slots: Any = None,
    ) -> None:
        codecs = codecs or {}
        slots_kwargs = {} if make_slots is None else {"make_slots": make_slots}
        self.flat_spec = flat_spec
        self.num_envs = num_envs
        self.max_length = max_length
        self.gatherer = gatherer if gatherer is not None else Gatherer()
        self._is_first, self._end = is_first, episode_end
        self.ring = _ring(flat_spec, max_length, stacks)
        placeholder = [
            ArraySpec((0,), d) if i in stacks else ArraySpec(s, d)
            for i, (s, d) in enumerate(zip(flat_spec.shapes, flat_spec.dtypes, strict=True))
        ]
        self._inner = inner(FlatSpec(placeholder), num_envs, max_length, self.gatherer)
        self._leaves: dict[int, _Leaf] = {}
        for i, stack in sorted(stacks.items()):
            path, leaf = flat_spec.paths[i], flat_spec.leaves[i]
            axis, frame_shape = stack.frame_spec(path, leaf)
            pad = stack.padding_frame(path, frame_shape, leaf.dtype)
            if i in codecs:
                ring = CompressedFrameRing(
                    leaf.shape,
                    leaf.dtype,
                    axis,
                    num_envs,
                    self.ring,
                    pad,
                    codecs[i],
                    self.gatherer,
                    f"frames_{i}",
                    **slots_kwargs,
                )
                self._leaves[i] = _Leaf(stack, ring)
                continue
            frames = FrameRing(
                f"frames_{i}",
                leaf.shape,
                leaf.dtype,
                axis,
                num_envs,
                self.ring,
                pad,
                allocate,
                lanes=stack.contiguous,
                gatherer=self.gatherer,
            )
            self._leaves[i] = _Leaf(stack, frames)
        self.history = allocate("history", (num_envs, self.ring), np.dtype(np.uint8))
        self._empty = np.empty((num_envs, 0), np.uint8)  # what the inner ring gets for frames
        self._all_rows = np.arange(num_envs, dtype=np.int64)
        self._max_back = max(s.stack_size for s in stacks.values()) - 1
        self._on_disk = bool(self.compressed_rings()) and make_slots is not None

    # -- raw arrays ---------------------------------------------------------
    def named_arrays(self) -> dict[str, np.ndarray]:
        """Every raw array this storage owns, by a stable file-safe name."""
        named = {f"leaf_{i}": a for i, a in enumerate(self._inner.arrays) if i not in self._leaves}
        named.update({f"frames_{i}": ring.frames for i, ring in self._raw_rings().items()})
        named["history"] = self.history
        return named

    @property
    def nbytes(self) -> int:
        """Bytes held: plain leaves, frame rings and the uint8 history."""
        frames = sum(leaf.frames.nbytes for leaf in self._leaves.values())
        return self._inner.nbytes + frames + self.history.nbytes

    def _raw_rings(self) -> dict[int, FrameRing]:
        return {i: x.frames for i, x in self._leaves.items() if isinstance(x.frames, FrameRing)}

    def compressed_rings(self) -> dict[int, CompressedFrameRing]:
        """``{leaf index: CompressedFrameRing}`` of the compressed frame leaves."""
        rings = {i: leaf.frames for i, leaf in self._leaves.items()}
        return {i: r for i, r in rings.items() if isinstance(r, CompressedFrameRing)}

    def prepare(self, leaves: list[Any]) -> list[Any]:
        """Compresses the newest frame of each compressed leaf (call it outside the lock)."""
        out = list(leaves)
        for i, ring in self.compressed_rings().items():
            out[i] = ring.encode_stacked(leaves[i])
        return out

    def flush(self) -> None:
        """Writes dirty pages of every memory-mapped array to disk (no-op in RAM)."""
        for array in self.named_arrays().values():
            if isinstance(array, np.memmap):
                array.flush()
        for ring in self.compressed_rings().values():
            ring.slots.flush()  # compressed frames on disk (DiskSlots); no-op in RAM

    def reserve(self, leaves: Sequence[Any]) -> None:
        """Grows the block files of compressed frames on disk for a write of ``leaves``
        (prepared by :meth:`prepare`) before anything is written.

        Raises:
            DiskFullError: the disk cannot hold them; nothing was changed.
        """
        for i, ring in self.compressed_rings().items():
            ring.slots.reserve(leaves[i])

    # -- writing ------------------------------------------------------------
    def _episode_starts(
        self, rows: np.ndarray, times: np.ndarray, leaves: Sequence[np.ndarray]
    ) -> np.ndarray:
        """Bool ``[k]``: rows whose step at ``times`` (> 0) starts an episode."""
        starts = np.zeros(len(rows), bool)
        if self._is_first is not None:
            starts |= np.asarray(leaves[self._is_first], bool)
        if self._end is not None:
            previous = self._inner.arrays[self._end.index][rows, (times - 1) % self.max_length]
            starts |= self._end.flags(previous)
        return starts

    def _history_rows(self, rows: np.ndarray | None, times: Any, leaves: Sequence[Any]) -> None:
        """Sets ``history`` of the steps at ``(rows, times)``: min(previous + 1, max_back),
        0 where an episode starts."""
        all_rows = self._all_rows if rows is None else rows
        t = np.broadcast_to(np.asarray(times, np.int64), all_rows.shape)
        if self._max_back == 0:
            history = np.zeros(len(all_rows), np.uint8)
        else:
            previous = self.history[all_rows, (t - 1) % self.ring]
            history = np.minimum(previous, self._max_back - 1) + 1
            history[self._episode_starts(all_rows, t, leaves) | (t == 0)] = 0
        self.history[all_rows, t % self.ring] = history

    def _history_all(self, t: int, leaves: Sequence[Any]) -> None:
        """:meth:`_history_rows` of every row at one time ``t`` (the common case)."""
        column = self.history[:, t % self.ring]
        if self._max_back == 0 or t == 0:
            column[:] = 0
            return
        np.minimum(self.history[:, (t - 1) % self.ring], self._max_back - 1, out=column)
        column += 1
        if self._is_first is not None:
            column[np.asarray(leaves[self._is_first], bool)] = 0
        if self._end is not None:
            previous = self._inner.arrays[self._end.index][:, (t - 1) % self.max_length]
            column[self._end.flags(previous)] = 0

    def write(
        self,
        rows: np.ndarray | None,
        slots: Any,
        leaves: Sequence[np.ndarray],
        *,
        times: Any = None,
    ) -> None:
        """Writes one step per row; frame leaves keep only their newest frame.

        Raises:
            InvalidArgumentError: ``times`` is missing.
        """
        if times is None:
            raise InvalidArgumentError("frame-stack storage needs the step times of a write.")
        if self._on_disk:  # compress (if not yet), then grow the block files: all before writing
            leaves = self.prepare(list(leaves))
            self.reserve(leaves)
        if rows is None and type(times) is int:
            self._history_all(times, leaves)  # every row at one clock: column views, no index
        else:
            self._history_rows(rows, times, leaves)
        plain = list(leaves)
        for i, leaf in self._leaves.items():
            leaf.frames.write_stacked(rows, times, leaves[i])
            plain[i] = self._empty if rows is None else self._empty[: len(rows)]
        self._inner.write(rows, slots, plain)

    # -- reading ------------------------------------------------------------
    def stacks(self, i: int, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Rebuilt stacks of leaf ``i`` for steps ``(rows, times)``: ``[*rows.shape, *shape]``."""
        leaf = self._leaves[i]
        k = leaf.stack.stack_size
        history = self.history[rows, times % self.ring]
        frames = leaf.frames
        if isinstance(frames, CompressedFrameRing) or not frames.lanes:  # compressed: no lanes
            return self._stacks(leaf, rows, times, history)
        out = frames.full_stacks(rows, times)
        short = np.flatnonzero(history.reshape(-1) < k - 1)  # near an episode start
        if len(short):
            flat = out.reshape(-1, *out.shape[rows.ndim :])
            picks = [x.reshape(-1)[short] for x in (rows, times, history)]
            flat[short] = self._stacks(leaf, *picks)
        return out

    def _stacks(
        self, leaf: _Leaf, rows: np.ndarray, times: np.ndarray, history: np.ndarray
    ) -> np.ndarray:
        """Stacks with padding, from per-position frame lookups (any layout)."""
        k, ring = leaf.stack.stack_size, leaf.frames
        back = np.arange(k - 1, -1, -1)
        history, rows = history[..., None], rows[..., None]
        if not leaf.stack.custom_padding and leaf.stack.padding == "reset":
            times, pad = times[..., None] - np.minimum(back, history), None
        else:
            times, pad = times[..., None] - back, back > history
        compressed = isinstance(ring, CompressedFrameRing)
        if not ring.lanes and (ring.axis == 0 or not leaf.stack.contiguous or compressed):
            frames = ring.take(rows, times, pad)  # [..., k, *frame_shape], frame-major
            lead = rows.ndim - 1
            stacks = np.moveaxis(frames, lead, lead + ring.axis)  # a view: no copy
            return np.ascontiguousarray(stacks) if leaf.stack.contiguous else stacks
        out = np.empty(rows.shape[:-1] + ring.shape, ring.dtype)
        prefix = (slice(None),) * (rows.ndim - 1 + ring.axis)
        for p in range(k):  # loop over stack positions, not over the batch
            pad_p = None if pad is None else pad[..., p]
            at: tuple[slice | int, ...] = (*prefix, p)
            out[at] = ring.take(rows[..., 0], times[..., p], pad_p)
        return out

    def gather(
        self,
        rows: np.ndarray,
        slots: np.ndarray,
        *,
        times: np.ndarray | None = None,
        leaf_ids: Sequence[int] | None = None,
    ) -> list[np.ndarray]:
        """Gathers ``(rows, slots)`` at row ``times``; frame leaves come back as full stacks.

        Raises:
            InvalidArgumentError: ``times`` is missing while a frame leaf is gathered.
        """
        out = self._inner.gather(rows, slots, leaf_ids=leaf_ids)
        ids = range(len(out)) if leaf_ids is None else leaf_ids
        wanted = [(pos, i) for pos, i in enumerate(ids) if i in self._leaves]
        if wanted:
            if times is None:
                raise InvalidArgumentError("frame-stack storage needs the step times of a gather.")
            at = np.asarray(times)
            rows = np.broadcast_to(rows, at.shape)
            for pos, i in wanted:
                out[pos] = self.stacks(i, rows, at)
        return out

    # -- state ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain-leaf ``columns``, the frame rings and the history (live arrays, not copies)."""
        frames = {f"frames_{i}": ring.frames for i, ring in self._raw_rings().items()}
        state = {**self._inner.state_dict(), "frames": frames, "history": self.history}
        rings = self.compressed_rings()
        compressed = {f"frames_{i}": r.slots.state_dict() for i, r in rings.items()}
        if compressed:
            state["compressed_frames"] = compressed
        return state

    def check_stored(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Raises CheckpointError when a stored step's compressed frame was never written."""
        for ring in self.compressed_rings().values():
            ring.slots.check_written(lo, hi)
        self._inner.check_stored(lo, hi)

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output (frames and history are copied).

        Raises:
            CheckpointError: an array is missing or has another shape or dtype.
        """
        self._inner.load_state_dict(state, allow_map=allow_map)
        names = sorted(f"frames_{i}" for i in self._raw_rings())
        frames = state.get("frames", {})
        if sorted(frames) != names:
            raise CheckpointError(f"saved frame rings {sorted(frames)}; this buffer has {names}.")
        compressed = state.get("compressed_frames", {})
        wanted = sorted(f"frames_{i}" for i in self.compressed_rings())
        if sorted(compressed) != wanted:
            raise CheckpointError(
                f"saved compressed frame rings {sorted(compressed)}; this buffer has {wanted}."
            )
        for i, ring in self.compressed_rings().items():
            ring.slots.load_state_dict(compressed[f"frames_{i}"], f"frames_{i}")
        pairs = [(f"frames_{i}", ring.frames) for i, ring in self._raw_rings().items()]
        for name, dest in [*pairs, ("history", self.history)]:
            source = np.asarray(frames[name] if name != "history" else state["history"])
            if source.shape != dest.shape or source.dtype != dest.dtype:
                raise CheckpointError(
                    f"saved {name} has shape {source.shape}, dtype {source.dtype}; this buffer "
                    f"needs shape {dest.shape}, dtype {dest.dtype}."
                )
            dest[...] = source


def stack_ring(flat_spec: FlatSpec, max_length: int, stacks: dict[int, FrameStack]) -> int:
    """Frames per row of a :class:`FrameStackStorage` with these stacks."""
    return _ring(flat_spec, max_length, stacks)


def frame_store_nbytes(
    flat_spec: FlatSpec,
    num_envs: int,
    max_length: int,
    stacks: dict[int, FrameStack],
    skip: AbstractSet[int] = frozenset(),
) -> int:
    """Bytes a :class:`FrameStackStorage` allocates (plain leaves, frame rings, history);
    leaves in ``skip`` (compressed) are not counted."""
    ring = _ring(flat_spec, max_length, stacks)
    total = num_envs * ring  # uint8 history
    for i, leaf in enumerate(flat_spec.leaves):
        if i in skip:
            continue
        if i not in stacks:
            total += num_envs * max_length * leaf.nbytes
            continue
        k = stacks[i].stack_size
        frame = leaf.nbytes // k
        axis = stacks[i].axis % len(leaf.shape)
        lanes = stacks[i].contiguous and lane_word(leaf.shape, leaf.dtype, axis) is not None
        total += (num_envs * ring + k) * frame if lanes else (num_envs * ring + 1) * frame
    return total
