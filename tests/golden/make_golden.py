"""Writes the golden checkpoints of format v1 (``python tests/golden/make_golden.py``).

The committed directories under ``tests/golden/v1/`` must load in every
future recollect version; ``tests/test_checkpoint.py`` loads them and checks
their contents with :func:`check`. Data are arithmetic in (row, time), so the
expected values do not depend on any RNG stream. Never regenerate v1 files
after a release; add ``v2/`` for a new format.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import numpy as np

import recollect as rc

SEED = 1234
Info = collections.namedtuple("Info", ["a", "b"])


def spec() -> dict[str, Any]:
    return {
        "observation": {
            "pos": rc.ArraySpec((3,), np.float32),
            "img": rc.ArraySpec((2, 2), np.uint8),
        },
        "action": rc.ArraySpec((), np.int32),
        "reward": rc.ArraySpec((), np.float16),
        "info": Info(rc.ArraySpec((), np.float64), rc.ArraySpec((2,), np.int64)),
        "is_last": rc.ArraySpec((), np.bool_),
    }


def step(rows: np.ndarray, t: int) -> dict[str, Any]:
    """The step of every row at time ``t``: values are functions of (row, t)."""
    r = np.asarray(rows)
    return {
        "observation": {
            "pos": np.stack([r * 100.0 + t, -r - t * 0.5, np.full(len(r), t * 0.25)], 1).astype(
                np.float32
            ),
            "img": ((r[:, None, None] * 7 + t + np.arange(4).reshape(2, 2)) % 256).astype(np.uint8),
        },
        "action": (r * 10 - t).astype(np.int32),
        "reward": (r + t * 0.5).astype(np.float16),
        "info": Info((r * t).astype(np.float64), np.stack([r, r + t], 1).astype(np.int64)),
        "is_last": (t + r) % 4 == 3,
    }


def _replay(num_envs: int, max_length: int, adds: int, clear_at: int | None) -> rc.ReplayBuffer:
    buf = rc.ReplayBuffer(spec(), num_envs * max_length, num_envs, rng=SEED, sequence_length=2)
    for t in range(adds):
        if t == clear_at:
            buf.clear()
        buf.add_batch(step(np.arange(num_envs), t))
    return buf


def _obs_value(t: np.ndarray | int) -> Any:
    return t + 0.5 * ((np.asarray(t) - 1) % 4 == 3)


def _transition() -> rc.TransitionBuffer:
    tb = rc.TransitionBuffer(capacity=8, num_envs=1, rng=SEED)
    for t in range(11):  # obs after a termination is shifted by 0.5: the chain breaks
        obs = np.full(2, _obs_value(t), np.float32)
        tb.add(obs, t % 3, float(t), obs + 1, terminated=t % 4 == 3)
    return tb


BUILDERS = {
    "replay_full_wrapped": lambda: _replay(2, 6, 9, None),
    "replay_partial_after_clear": lambda: _replay(2, 6, 8, 5),
    "transition": _transition,
}
EXPECTED = {  # t, t_clear, stored steps per row
    "replay_full_wrapped": (9, 0, 6),
    "replay_partial_after_clear": (8, 5, 3),
}


def _leaves(tree: Any) -> list[np.ndarray]:
    import optree

    return optree.tree_leaves(tree, none_is_leaf=False)


def check(name: str, loaded: Any) -> None:
    """Asserts that ``loaded`` holds exactly what :data:`BUILDERS` ``[name]`` saved."""
    if name == "transition":
        assert isinstance(loaded, rc.TransitionBuffer)
        assert loaded.num_frames() == 8
        s = loaded.sample(64)
        t = s.ids  # one env: id == time
        obs = np.repeat(_obs_value(t)[:, None], 2, 1).astype(np.float32)
        np.testing.assert_array_equal(s.observation, obs)
        np.testing.assert_array_equal(s.next_observation, s.observation + 1)
        np.testing.assert_array_equal(s.terminated, t % 4 == 3)
        return
    t, t_clear, stored = EXPECTED[name]
    assert isinstance(loaded, rc.ReplayBuffer)
    index = loaded.table.index
    assert index.t.tolist() == [t, t] and index.t_clear.tolist() == [t_clear, t_clear]
    assert loaded.num_frames() == 2 * stored
    assert loaded.reader.sequence_length == 2
    assert loaded.reader.rng.bit_generator.state == np.random.default_rng(SEED).bit_generator.state
    assert type(loaded.data_spec["info"]).__name__ == "Info"
    assert loaded.data_spec["info"]._fields == ("a", "b")
    times = range(t - stored, t)
    per_time = [_leaves(step(np.arange(2), k)) for k in times]
    expected = [np.stack(x, 1) for x in zip(*per_time, strict=True)]
    got = _leaves(loaded.gather_all())
    for e, g in zip(expected, got, strict=True):
        assert e.dtype == g.dtype
        np.testing.assert_array_equal(e, g)
    ids = rc.ids.encode(np.arange(2)[:, None], np.arange(t - stored, t)[None, :])
    np.testing.assert_array_equal(loaded.reader.item_ids(), ids)
    assert loaded.sample(4, 2).data["action"].shape == (4, 2)


def main(out: Path) -> None:
    for name, build in BUILDERS.items():
        build().save(out / name)
        check(name, rc.load_buffer(out / name))
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "v2")
