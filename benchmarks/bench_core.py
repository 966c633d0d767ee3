"""Core replay buffer benchmark: workloads W1 (atari) and W2 (mujoco) of WORKLOADS.md.

Run ``python benchmarks/bench_core.py`` (about 3-4 minutes) or with ``--quick``.

Every table is measured in this one process; rows of a table are timed
interleaved and reported as the median over repeats (transitions/s, or
windows/s for windows) with the ratio to the numpy limit rows of the same run:

* ``numpy gather``: ``store[idx]`` per field on plain per-field arrays, ``idx``
  drawn with ``rng.integers`` inside the timed call.
* ``numpy copy``: ``np.copyto`` of the same number of bytes between two
  preallocated contiguous arrays (the memcpy limit; the source may sit in cache).
* ``numpy ring``: hand-written per-field ring, ``arr[pos:pos + n] = value``.

How recollect stores next observations (the fair default way of each workload):

* W1: ``ReplayBuffer`` with the episode-aware spec (observation, action,
  reward, is_last), each observation stored once; a transition is a window of
  ``num_steps=2`` (next observation = step 2). Also ``TransitionBuffer`` (same
  dedup, the beginner API). The limit rows gather a naive store with a second
  copy of observations, i.e. the same bytes a transition carries.
* W2: ``ReplayBuffer`` with the W2 spec as given (observation, action, reward,
  next_observation, and done as the ``is_last`` leaf): 41 floats per step are
  cheap, so ``sample(256)`` returns a transition with one gather per leaf,
  exactly the work of the gather row; "windows of 2" samples the same buffer
  with ``num_steps=2`` (episode-aware) against a gather row of index pairs.

Peers (cpprb, stable-baselines3, torchrl) run when installed, each its default
way, on the same data; for memory reasons each peer is timed in its own group
together with fresh limit rows, and its ratios are to that group's limits.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _peers
import recollect as rc
from _common import Row, cycle, measure, parse_args, print_table, rss_bytes

W1_CAPACITY, W1_ENVS, W1_OBS = 100_000, 8, (84, 84, 4)
W2_CAPACITY, W2_ENVS = 1_000_000, 8
POOL = 2048  # distinct random steps cycled through (multiple of the env count)


# -- plain numpy baselines -------------------------------------------------------------
class NumpyRing:
    """What a user would hand-write: one preallocated array per field, a write position."""

    def __init__(self, capacity: int, spec: dict[str, tuple[tuple[int, ...], Any]]) -> None:
        self.capacity = capacity
        self.arrays = {k: np.zeros((capacity, *s), d) for k, (s, d) in spec.items()}
        self.pos = 0
        self.size = 0

    def add_batch(self, step: dict[str, np.ndarray]) -> None:
        n = len(step["observation"])
        i = self.pos
        for key, array in self.arrays.items():
            array[i : i + n] = step[key]
        self.pos = (i + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def add(self, step: dict[str, np.ndarray]) -> None:
        i = self.pos
        for key, array in self.arrays.items():
            array[i] = step[key]
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)


def limit_rows(store: NumpyRing, batch: int, rng: np.random.Generator, pairs: bool) -> list[Row]:
    """The gather row (per-field fancy index) and the copy row (same bytes, memcpy)."""
    arrays = list(store.arrays.values())
    n = store.capacity
    offsets = np.arange(2)

    def gather() -> list[np.ndarray]:
        idx = rng.integers(0, n, batch)
        if pairs:
            idx = (idx[:, None] + offsets) % n
        return [a[idx] for a in arrays]

    nbytes = batch * sum(a[0].nbytes for a in arrays) * (2 if pairs else 1)
    src = np.ones(nbytes, np.uint8)
    dst = np.ones(nbytes, np.uint8)
    suffix = " pairs" if pairs else ""
    return [
        Row(f"numpy gather{suffix} ({len(arrays)} fields)", gather, batch),
        Row(f"numpy copy{suffix} ({nbytes / 2**20:.2f} MiB)", lambda: np.copyto(dst, src), batch),
    ]


def _timed_fill(fill: Any) -> Any:
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    obj = fill()
    secs = time.perf_counter() - t0
    return obj, rss_bytes() - before, secs


# -- W1 --------------------------------------------------------------------------------
def w1_data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.integers(0, 256, (POOL, *W1_OBS), dtype=np.uint8),
        "act": rng.integers(0, 18, POOL).astype(np.int64),
        "rew": rng.standard_normal(POOL).astype(np.float32),
        "done": rng.random(POOL) < 1 / 2000,
    }


def w1_steps(data: dict[str, np.ndarray]) -> Any:
    """Yields (obs, act, rew, next_obs, done) batches of 8 envs; obs chain into next_obs."""
    e = W1_ENVS
    for t in range(W1_CAPACITY // e):
        i, j = (t * e) % POOL, ((t + 1) * e) % POOL
        sl = slice(i, i + e)
        yield (
            data["obs"][sl],
            data["act"][sl],
            data["rew"][sl],
            data["obs"][j : j + e],
            data["done"][sl],
        )


def w1_fills(data: dict[str, np.ndarray]) -> dict[str, Any]:
    """Factories that build and fill each W1 store with the same steps."""

    def naive() -> NumpyRing:
        spec = {
            "observation": (W1_OBS, np.uint8),
            "action": ((), np.int64),
            "reward": ((), np.float32),
            "is_last": ((), np.bool_),
            "next_observation": (W1_OBS, np.uint8),
        }
        ring = NumpyRing(W1_CAPACITY, spec)
        for o, a, r, n, d in w1_steps(data):
            ring.add_batch(
                {"observation": o, "action": a, "reward": r, "is_last": d, "next_observation": n}
            )
        return ring

    def replay() -> rc.ReplayBuffer:
        spec = {
            "observation": rc.ArraySpec(W1_OBS, np.uint8),
            "action": rc.ArraySpec((), np.int64),
            "reward": rc.ArraySpec((), np.float32),
            "is_last": rc.ArraySpec((), np.bool_),
        }
        buf = rc.ReplayBuffer(spec, W1_CAPACITY, W1_ENVS, rng=0)
        for o, a, r, _, d in w1_steps(data):
            buf.add_batch({"observation": o, "action": a, "reward": r, "is_last": d})
        return buf

    def transition() -> rc.TransitionBuffer:
        buf = rc.TransitionBuffer(W1_CAPACITY, W1_ENVS, rng=0)
        for o, a, r, n, d in w1_steps(data):
            buf.add(o, a, r, n, d)
        return buf

    return {"naive": naive, "replay": replay, "transition": transition}


def w1_peer_fill(name: str, data: dict[str, np.ndarray]) -> Any:
    spec = {
        "obs": (W1_OBS, np.uint8),
        "act": ((), np.int64),
        "rew": ((), np.float32),
        "next_obs": (W1_OBS, np.uint8),
        "done": ((), np.bool_),
    }
    peer = {
        "cpprb": lambda: _peers.cpprb_buffer(W1_CAPACITY, spec),
        "stable_baselines3": lambda: _peers.sb3_buffer(W1_CAPACITY, spec, W1_ENVS),
        "torchrl": lambda: _peers.torchrl_buffer(W1_CAPACITY),
    }[name]()
    chunk = 1 if name == "stable_baselines3" else 128  # SB3 takes exactly n_envs rows
    steps = list(w1_steps(data))
    for k in range(0, len(steps), chunk):
        cols = [np.concatenate(c) for c in zip(*steps[k : k + chunk], strict=True)]
        peer.fill(dict(zip(("obs", "act", "rew", "next_obs", "done"), cols, strict=True)))
    return peer


def run_w1(args: Any) -> None:
    rng = np.random.default_rng(1)
    data = w1_data(rng)
    if not args.no_peers and "torchrl" in _peers.available():
        import torch  # noqa: F401 - imported before any RSS baseline

    fills = w1_fills(data)
    stores, memory = {}, {}
    for key, fill in fills.items():
        stores[key], delta, secs = _timed_fill(fill)
        memory[key] = (delta, secs)
    for batch in (32, 256):
        replay, transition = stores["replay"], stores["transition"]
        rows = limit_rows(stores["naive"], batch, rng, pairs=False)
        rows += [
            Row(
                "recollect ReplayBuffer window num_steps=2",
                lambda b=batch, r=replay: r.sample(b, 2),
                batch,
            ),
            Row(
                "recollect TransitionBuffer.sample",
                lambda b=batch, t=transition: t.sample(b),
                batch,
            ),
            Row(
                "  same, ReplayBuffer on 1 gather thread",
                lambda b=batch, r=replay: _one_thread(r, lambda: r.sample(b, 2)),
                batch,
            ),
        ]
        measure(rows, args.repeats, args.repeat_s)
        print_table(f"W1 sample {batch} (uint8 84x84x4, 8 envs, 100k)", rows, limits(rows))
    del replay, transition, rows, stores["replay"], stores["transition"]
    gc.collect()
    for name in [] if args.no_peers else _peers.available():
        try:
            peer, delta, secs = _timed_fill(lambda n=name: w1_peer_fill(n, data))
        except Exception as err:  # a broken optional peer is skipped
            print(f"# skipped {name}: {type(err).__name__}: {err}")
            continue
        memory[name] = (delta, secs)
        for batch in (32, 256):
            rows = limit_rows(stores["naive"], batch, rng, pairs=False)
            rows.append(Row(f"{peer.name}.sample", lambda b=batch, p=peer: p.sample(b), batch))
            measure(rows, args.repeats, args.repeat_s)
            print_table(
                f"W1 sample {batch}, {peer.name} with its own limit rows", rows, limits(rows)
            )
        del peer
        gc.collect()
    print(f"\n## W1 memory (RSS delta after filling {W1_CAPACITY:,} transitions)")
    obs_bytes = int(np.prod(W1_OBS))
    print(f"{'store':<30} {'bytes/transition':>18} {'x one obs':>10} {'fill s':>8}")
    for key, (delta, secs) in memory.items():
        per = delta / W1_CAPACITY
        print(f"{key:<30} {per:>18,.0f} {per / obs_bytes:>10.2f} {secs:>8.1f}")


def _one_thread(buffer: Any, fn: Any) -> Any:
    """Runs ``fn`` with ``buffer``'s split gathers off (diagnostic row)."""
    gatherer = buffer.storage.gatherer
    threads, gatherer.threads = gatherer.threads, 1
    try:
        return fn()
    finally:
        gatherer.threads = threads


def limits(rows: list[Row]) -> list[str]:
    return [rows[0].name, rows[1].name]


# -- W2 --------------------------------------------------------------------------------
W2_FIELDS = {
    "observation": ((17,), np.float32),
    "action": ((6,), np.float32),
    "reward": ((), np.float32),
    "next_observation": ((17,), np.float32),
    "is_last": ((), np.bool_),
}
PEER_KEYS = {"observation": "obs", "action": "act", "reward": "rew"}
PEER_KEYS.update({"next_observation": "next_obs", "is_last": "done"})


def w2_steps(rng: np.random.Generator, lead: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    steps = []
    for _ in range(POOL // 8):
        step = {}
        for key, (shape, dtype) in W2_FIELDS.items():
            if dtype == np.bool_:
                step[key] = rng.random(lead) < 1 / 1000
            else:
                step[key] = rng.standard_normal((*lead, *shape)).astype(dtype)
        steps.append(step)
    return steps


def w2_buffer(num_envs: int, **kwargs: Any) -> rc.ReplayBuffer:
    spec = {k: rc.ArraySpec(s, d) for k, (s, d) in W2_FIELDS.items()}
    return rc.ReplayBuffer(spec, W2_CAPACITY, num_envs, rng=0, **kwargs)


def run_w2(args: Any) -> None:
    rng = np.random.default_rng(2)
    batches, singles = w2_steps(rng, (W2_ENVS,)), w2_steps(rng, ())
    ring, ring1 = NumpyRing(W2_CAPACITY, W2_FIELDS), NumpyRing(W2_CAPACITY, W2_FIELDS)
    buf, buf1 = w2_buffer(W2_ENVS), w2_buffer(1)
    limited = w2_buffer(W2_ENVS, rate_limiter=rc.MinSize(1))  # the rate limiter's overhead
    t0 = time.perf_counter()
    nxt = cycle(batches)
    for _ in range(W2_CAPACITY // W2_ENVS):
        step = nxt()
        ring.add_batch(step)
        buf.add_batch(step)
        limited.add_batch(step)
    for a in ring1.arrays.values():  # make both single-add stores resident
        a[:] = 0
    for a in buf1.storage.arrays:
        a[:] = 0
    print(f"\n# W2 filled numpy ring + recollect in {time.perf_counter() - t0:.1f}s")
    peers = {} if args.no_peers else w2_peers(batches, singles)
    nb, n1 = cycle(batches), cycle(singles)
    rows = [Row("numpy ring add_batch (8)", lambda: ring.add_batch(nb()), 8)]
    rows.append(Row("recollect ReplayBuffer.add_batch (8)", lambda: buf.add_batch(nb()), 8))
    rows.append(Row("recollect add_batch (8), MinSize(1)", lambda: limited.add_batch(nb()), 8))
    for p, _ in peers.values():
        nxt_p = cycle(p.conv_all(batches))
        rows.append(Row(f"{p.name}.add (8)", lambda p=p, n=nxt_p: p.add(n()), 8))
    print_table(
        "W2 add, batches of 8 envs",
        measure(rows, args.repeats, args.repeat_s),
        ["numpy ring add_batch (8)"],
    )
    rows = [Row("numpy ring add (1)", lambda: ring1.add(n1()), 1)]
    rows.append(Row("recollect ReplayBuffer.add (num_envs=1)", lambda: buf1.add(n1()), 1))
    for _, p in peers.values():
        nxt_p = cycle(p.conv_all(singles))
        rows.append(Row(f"{p.name}.add (1)", lambda p=p, n=nxt_p: p.add(n()), 1))
    print_table(
        "W2 add, single transition",
        measure(rows, args.repeats, args.repeat_s),
        ["numpy ring add (1)"],
    )
    rows = limit_rows(ring, 256, rng, pairs=False)
    rows.append(Row("recollect ReplayBuffer.sample(256)", lambda: buf.sample(256), 256))
    rows.append(Row("recollect sample(256), MinSize(1)", lambda: limited.sample(256), 256))
    rows += [
        Row(f"{p.name}.sample(256)", lambda p=p: p.sample(256), 256) for p, _ in peers.values()
    ]
    measure(rows, args.repeats, args.repeat_s)
    print_table("W2 sample 256 (1M transitions)", rows, limits(rows))
    rows = limit_rows(ring, 256, rng, pairs=True)
    rows.append(
        Row("recollect ReplayBuffer.sample(256, num_steps=2)", lambda: buf.sample(256, 2), 256)
    )
    measure(rows, args.repeats, args.repeat_s)
    print_table("W2 windows of num_steps=2, batch 256 (windows/s)", rows, limits(rows))


def w2_peers(batches: list[dict], singles: list[dict]) -> dict[str, tuple[Any, Any]]:
    """name -> (peer with 8 envs filled to 1M, peer for single adds)."""
    spec = {PEER_KEYS[k]: v for k, v in W2_FIELDS.items()}
    factories = {
        "cpprb": lambda n: _peers.cpprb_buffer(W2_CAPACITY, spec),
        "stable_baselines3": lambda n: _peers.sb3_buffer(W2_CAPACITY, spec, n),
        "torchrl": lambda n: _peers.torchrl_buffer(W2_CAPACITY),
    }
    big = {k: np.concatenate([b[k] for b in batches]) for k in W2_FIELDS}
    out = {}
    for name in _peers.available():
        try:
            peer, peer1 = factories[name](W2_ENVS), factories[name](1)
            for p, lead in ((peer, True), (peer1, False)):
                p.conv = _converter(lead, name == "stable_baselines3")
                p.conv_all = lambda steps, p=p: [p.conv(s) for s in steps]
            fill = peer.conv(big)
            for _ in range(W2_CAPACITY // len(big["observation"])):
                peer.fill(fill)
        except Exception as err:  # a broken optional peer is skipped
            print(f"# skipped {name}: {type(err).__name__}: {err}")
            continue
        out[name] = (peer, peer1)
    return out


def _converter(lead: bool, add_env_dim: bool) -> Any:
    """Renames recollect's keys to the peers' (obs, act, rew, next_obs, done)."""

    def conv(step: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {PEER_KEYS[k]: v for k, v in step.items()}
        if not lead and add_env_dim:
            out = {k: np.asarray(v)[None] for k, v in out.items()}
        return out

    return conv


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    only = set(args.only.split(",")) if args.only else {"w1", "w2"}
    print(f"# recollect {rc.__version__} ({Path(rc.__file__).parent}), numpy {np.__version__}")
    print(f"# repeats={args.repeats}, interleaved; medians")
    print(f"# peers: {'skipped' if args.no_peers else _peers.available() or 'none installed'}")
    t0 = time.perf_counter()
    if "w2" in only:
        run_w2(args)
    if "w1" in only:
        run_w1(args)
    print(f"\n# total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
