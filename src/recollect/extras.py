"""Which extra installs which optional module, for import errors that say what to install.

``import recollect`` needs numpy and optree only; adapters and commands import their
framework when used. A missing one raises :class:`MissingExtraError` (an
``ImportError``) that names the extra, e.g. ``pip install "recollect[torch]"``.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra"]

#: top-level module -> the recollect extra that installs it
EXTRAS: dict[str, str] = {
    "torch": "torch",
    "tensorflow": "tf",
    "tf_keras": "tf",
    "jax": "jax",
    "jaxlib": "jax",
    "gymnasium": "gym",
    "ale_py": "atari",
    "cv2": "atari",
    "ray": "ray",
    "click": "cli",
    "tqdm": "cli",
    "matplotlib": "cli",
    "minari": "minari",
    "h5py": "minari",
    "tensorflow_datasets": "rlds",
    "stable_baselines3": "sb3",
    "sb3_contrib": "sb3",
    "grpc": "reverb",
    "google": "reverb",  # google.protobuf
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra to install."""


def missing_extra(err: ImportError, feature: str) -> ImportError:
    """The error to raise instead of ``err`` (from a failed optional import) for ``feature``.

    Args:
        err: the ImportError raised by ``import <module>``.
        feature: what needed it, e.g. ``"recollect.torch"``.

    Returns:
        A :class:`MissingExtraError` naming the extra when the missing module is one an
        extra installs, else ``err`` unchanged (a broken install of a present package
        keeps its own message).
    """
    name = (getattr(err, "name", None) or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return err
    return MissingExtraError(
        f'{feature} needs {name}, which is not installed: pip install "recollect[{extra}]" '
        f'(in a checkout: pip install -c constraints.txt -e ".[{extra}]").',
        name=name,
    )
