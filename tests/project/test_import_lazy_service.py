"""``import recollect`` loads neither the replay service nor Ray (issue 27).

The service (``recollect.service``) and Ray load on first use: ``recollect.service``
attribute access, or a :class:`~recollect.ReplayBufferManager` given a service client.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import recollect
recollect.ReplayBufferManager, recollect.ReplayBuffer, recollect.load_buffer
print(json.dumps(sorted(
    m for m in sys.modules
    if m == "recollect.service" or m.startswith("recollect.service.")
    or m.split(".")[0] in ("ray", "torch", "tensorflow", "jax")
)))
"""


def _loaded_after(script: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_recollect_loads_no_service_and_no_ray():
    assert _loaded_after(SCRIPT) == []


def test_service_attribute_still_loads_the_service_on_first_use():
    script = """
import json, sys
import recollect
recollect.service.Client, recollect.service.Server
print(json.dumps(sorted(m for m in sys.modules if m.startswith("recollect.service"))))
"""
    loaded = _loaded_after(script)
    assert "recollect.service.client" in loaded and "recollect.service.server" in loaded


def test_manager_without_service_does_not_load_the_service(tmp_path):
    script = f"""
import json, sys
import numpy as np
import recollect as rc
m = rc.ReplayBufferManager(rc.ArraySpec((2,), np.float32), 8, checkpoint_dir={str(tmp_path)!r})
m.create_replay_buffer()
m.has_checkpoint(); m.num_frames(); m.checkpoint(); m.clear(); m.close()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("recollect.service"))))
"""
    assert _loaded_after(script) == []
