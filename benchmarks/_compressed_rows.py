"""Compressed frame store rows of ``bench_memory.py`` on real ALE frames (see its docstring)."""

from __future__ import annotations

import gc
import time

import numpy as np

import recollect as rc
from _ale_frames import GAMES, load, stacks
from _common import Row, measure, print_table, rss_bytes
from recollect.storage.compression.compressed import trim_heap

E = 8
ESTIMATE_BATCHES = 16  # add_batch inputs given to estimate_memory as sample_steps
POOL = 64  # prebuilt add_batch inputs per game (steady-state add rows)


def spec() -> dict:
    return {
        "observation": rc.ArraySpec((84, 84, 4), np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
        "is_terminal": rc.ArraySpec((), bool),
    }


class Frames:
    """One game's recorded steps; ``batch(t)`` is the add_batch input of step ``t % steps``."""

    def __init__(self, game: str, steps: int) -> None:
        self.game, self.data = game, load(game, steps)
        self.steps = len(self.data["frames"])
        self.rng = np.random.default_rng(0)

    def batch(self, t: int) -> dict:
        t %= self.steps
        part = {k: v[max(0, t - 3) : t + 1] for k, v in self.data.items()}
        first = part["is_first"].copy()
        first[0] |= True  # the slice starts a (virtual) history: reset padding is exact there
        obs = stacks({"frames": part["frames"], "is_first": first})[-1]  # [E, 4, 84, 84]
        last = self.data["is_last"][t]
        return {
            "observation": np.ascontiguousarray(np.moveaxis(obs, 1, -1)),
            "action": self.rng.integers(0, 6, E),
            "reward": np.zeros(E, np.float32),
            "is_last": last,
            "is_terminal": last,
        }


def make(capacity: int, codec: str | None) -> rc.ReplayBuffer:
    comp = None if codec is None else {"observation": codec}
    stacks_ = {"observation": rc.FrameStack(4)}
    return rc.ReplayBuffer(spec(), capacity, E, rng=0, frame_stacks=stacks_, compression=comp)


def fill(buf: rc.ReplayBuffer, frames: Frames, steps: int) -> float:
    """Adds ``steps // E`` batches (cycling the recording); returns add_batch seconds."""
    spent = 0.0
    for t in range(steps // E):
        b = frames.batch(t)
        t0 = time.perf_counter()
        buf.add_batch(b)
        spent += time.perf_counter() - t0
    return spent


def memory_rows(games: list[Frames], capacity: int, codec: str) -> dict[str, rc.ReplayBuffer]:
    print(f"\n## W1 memory, compressed frame store ({codec}), real ALE frames, 8 envs")
    print(f"capacity {capacity:,} steps; recording of {games[0].steps:,} steps x 8 envs per game")
    head = f"{'game':<16}{'RSS B/step':>12}{'nbytes B/step':>15}{'codec B/frame':>15}"
    head += f"{'estimate B/step':>17}{'fill steps/s':>14}{'dictionary B':>14}"
    print(head + "\n" + "-" * len(head))
    bufs, per_step = {}, []
    for g in games:
        gc.collect()
        trim_heap()  # freed heap of earlier rows first: the delta is this buffer's
        before = rss_bytes()
        buf = make(capacity, codec)
        seconds = fill(buf, g, capacity)
        delta = rss_bytes() - before
        slots = _frame_slots(buf)
        batches = [g.batch(t) for t in range(100, 100 + ESTIMATE_BATCHES)]
        sample = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
        estimate = rc.estimate_memory(
            spec(), capacity, E, frame_stacks={"observation": rc.FrameStack(4)},
            compression={"observation": codec}, sample_steps=sample,
        )  # fmt: skip
        per_frame = slots.stored_bytes / max(1, int((slots.offsets >= 0).sum()))
        per_step.append(delta / capacity)
        print(
            f"{g.game:<16}{delta / capacity:>12,.0f}{buf.nbytes / capacity:>15,.0f}"
            f"{per_frame:>15,.0f}{estimate / capacity:>17,.0f}{capacity / seconds:>14,.0f}"
            f"{len(slots.dictionary or b''):>14,}"
        )
        bufs[f"{codec} {g.game}"] = buf
    print(f"{'mean':<16}{np.mean(per_step):>12,.0f}   (target <= 900; MsPacman <= 1,600)")
    print(
        f"estimate: rc.estimate_memory from {ESTIMATE_BATCHES} add_batch inputs "
        f"({ESTIMATE_BATCHES * E} frames: half train a dictionary, half measure it)"
    )
    return bufs


def _frame_slots(buf: rc.ReplayBuffer):
    state = buf.storage
    for ring in state.compressed_rings().values():
        return ring.slots
    raise RuntimeError("no compressed frame ring")


def throughput_tables(games: list[Frames], bufs: dict, raw: rc.ReplayBuffer, args) -> None:
    pools = {g.game: [g.batch(t) for t in range(500, 500 + POOL)] for g in games}
    nbytes = sum(v.nbytes for v in pools[games[0].game][0].values())
    slots = max(2, (64 << 20) // nbytes)
    dest = np.empty((slots, nbytes), np.uint8)
    dest.fill(0)  # first touch of every page outside the timing (a warm destination)
    srcs = [
        np.concatenate([v.reshape(-1).view(np.uint8) for v in b.values()])
        for b in pools[games[0].game]
    ]
    state = {"i": 0}

    def memcpy():
        i = state["i"] = state["i"] + 1
        np.copyto(dest[i % slots], srcs[i % len(srcs)])

    def adder(buf, pool):
        it = iter(range(1 << 62))
        return lambda: buf.add_batch(pool[next(it) % POOL])

    first = games[0].game
    rows = [
        Row("memcpy (batch bytes, rotating 64 MiB)", memcpy, E),
        Row(f"add_batch frame store ({first})", adder(raw, pools[first]), E),
    ]
    rows += [Row(f"add_batch {k}", adder(b, pools[k.split()[1]]), E) for k, b in bufs.items()]
    print_table(
        "W1 add_batch, real ALE frames (8 envs, ring full)",
        measure(rows, args.repeats, args.repeat_s),
        ["memcpy (batch bytes, rotating 64 MiB)", f"add_batch frame store ({first})"],
    )
    for batch in (32, 256):
        out = batch * (2 * 4 * 84 * 84 + 2 * (8 + 4 + 1 + 1))
        src, dst = np.ones(out, np.uint8), np.empty(out, np.uint8)
        rows = [
            Row(f"memcpy ({out // 1024} KiB)", lambda s=src, d=dst: np.copyto(d, s), batch),
            Row(
                f"frame store sample({batch}, 2) ({first})", lambda n=batch: raw.sample(n, 2), batch
            ),
        ]
        rows += [
            Row(f"{k} sample({batch}, 2)", lambda b=b, n=batch: b.sample(n, 2), batch)
            for k, b in bufs.items()
        ]
        print_table(
            f"W1 uniform sample, batch {batch}, real ALE frames",
            measure(rows, args.repeats, args.repeat_s),
            [rows[0].name, rows[1].name],
        )


def run(args, capacity: int, record_steps: int, names: list[str], codecs: list[str]) -> None:
    games = [Frames(g, record_steps) for g in names]
    gc.collect()
    before = rss_bytes()
    raw = make(capacity, None)
    fill(raw, games[0], capacity)
    per_step = (rss_bytes() - before) / capacity
    print(f"\nuncompressed frame store ({games[0].game}): RSS {per_step:,.0f} B/step")
    bufs = {}
    for codec in codecs:
        bufs.update(memory_rows(games, capacity, codec))
    throughput_tables(games, bufs, raw, args)


def million(steps: int, record_steps: int) -> None:
    """One Pong buffer of ``steps`` steps (8 envs), filled by cycling the recording."""
    g = Frames("Pong", record_steps)
    gc.collect()
    before = rss_bytes()
    buf = make(steps, "zstd")
    seconds = fill(buf, g, steps)
    delta = rss_bytes() - before
    print(f"\n## {steps:,}-step Pong buffer (8 envs, zstd; the {g.steps:,}-step recording cycled)")
    print(f"RSS delta {delta / 2**30:.3f} GiB ({delta / steps:,.0f} B/step; target <= 1 GB)")
    print(f"nbytes {buf.nbytes / 2**30:.3f} GiB, add_batch {steps / seconds:,.0f} steps/s")


__all__ = ["GAMES", "million", "run"]
