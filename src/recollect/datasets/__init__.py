"""Offline RL datasets: save a buffer's episodes as Minari or RLDS datasets, load them back.

``import recollect.datasets`` imports neither Minari nor TensorFlow; each
function imports its library when it runs (extras ``recollect[minari]`` and
``recollect[rlds]``).

- :func:`to_minari` / :func:`from_minari`: Minari datasets (``minari.load_dataset``).
- :func:`to_rlds` / :func:`from_rlds`: RLDS episodes in TFDS format
  (``tfds.builder_from_directory``), or any ``tf.data.Dataset`` of RLDS episodes.

Buffers hold RLDS steps (``observation, action, reward, discount, is_first,
is_last, is_terminal``); only complete episodes are exported, and imports
fill rows with whole episodes. See :mod:`recollect.datasets.episodes`.
"""

from recollect.datasets.minari import MinariExport, from_minari, to_minari
from recollect.datasets.rlds import RldsExport, from_rlds, to_rlds

__all__ = ["MinariExport", "RldsExport", "from_minari", "from_rlds", "to_minari", "to_rlds"]
