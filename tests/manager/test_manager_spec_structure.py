"""Loading through the manager compares the nest structure of the spec, not only its leaves:
a buffer samples in its own spec's structure, so a different one is refused."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError

Transition = collections.namedtuple("Transition", ["action", "observation"])
Other = collections.namedtuple("Other", ["action", "observation"])
ACTION, OBS = rc.ArraySpec((), np.int64), rc.ArraySpec((3,), np.float32)
STEP = {"action": np.ones(1, np.int64), "observation": np.ones((1, 3), np.float32)}


def _save(path, spec):
    with rc.ReplayBufferManager(spec, 8, checkpoint_dir=path) as manager:
        buffer, _ = manager.create_replay_buffer()
        if isinstance(spec, Transition):
            step = Transition(**STEP)
        elif isinstance(spec, dict):
            step = dict(STEP)
        else:
            step = type(spec)(STEP.values())
        buffer.add_batch(step)
        manager.checkpoint()


def _load(path, spec):
    with rc.ReplayBufferManager(spec, checkpoint_dir=path) as manager:
        buffer, _ = manager.load_replay_buffer()
        return buffer.sample(2, None).data


def test_dict_spec_refuses_a_checkpoint_saved_with_a_namedtuple_spec_of_the_same_leaves(
    tmp_path,
):
    _save(tmp_path / "ck", Transition(ACTION, OBS))
    message = (
        "has the structure Transition(action=*, observation=*) (samples come back in it), "
        "the manager's data_spec the structure {'action': *, 'observation': *}. "
        "Pass the checkpoint's spec (or none)"
    )
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        _load(tmp_path / "ck", {"action": ACTION, "observation": OBS})


@pytest.mark.parametrize(
    "spec", [Transition(ACTION, OBS), Other(ACTION, OBS)], ids=["Transition", "Other"]
)
def test_namedtuple_spec_refuses_a_checkpoint_saved_with_a_dict_spec(tmp_path, spec):
    _save(tmp_path / "ck", {"action": ACTION, "observation": OBS})
    with pytest.raises(InvalidArgumentError, match=r"has the structure \{'action': \*, "):
        _load(tmp_path / "ck", spec)


def test_the_same_structure_loads_and_samples_in_it(tmp_path):
    _save(tmp_path / "nt", Transition(ACTION, OBS))
    assert type(_load(tmp_path / "nt", Transition(ACTION, OBS))).__name__ == "Transition"
    _save(tmp_path / "d", {"action": ACTION, "observation": OBS})
    data = _load(tmp_path / "d", {"observation": OBS, "action": ACTION})  # any key order
    assert isinstance(data, dict) and sorted(data) == ["action", "observation"]
    assert type(_load(tmp_path / "nt", None)).__name__ == "Transition"  # no spec: the stored one


def test_a_namedtuple_of_another_name_is_another_structure(tmp_path):
    _save(tmp_path / "ck", Transition(ACTION, OBS))
    with pytest.raises(InvalidArgumentError, match=r"the manager's data_spec the structure Other"):
        _load(tmp_path / "ck", Other(ACTION, OBS))


def test_a_list_spec_refuses_a_checkpoint_saved_with_a_tuple_spec(tmp_path):
    _save(tmp_path / "ck", (ACTION, OBS))
    message = "has the structure (*, *) (samples come back in it), the manager's data_spec "
    with pytest.raises(InvalidArgumentError, match=re.escape(message + "the structure [*, *]")):
        _load(tmp_path / "ck", [ACTION, OBS])


def test_other_leaves_are_still_reported_as_leaves(tmp_path):
    _save(tmp_path / "ck", Transition(ACTION, OBS))
    with pytest.raises(InvalidArgumentError, match=r"has leaves \[\('action', \(\), 'int64'\)"):
        _load(tmp_path / "ck", {"action": ACTION, "observation": rc.ArraySpec((4,), np.float32)})
