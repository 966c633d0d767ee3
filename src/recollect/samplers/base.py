"""The sampler interface: which windows come back, and with what probability.

Samplers see counters and validity (a :class:`~recollect.samplers.windows.WindowIndex`),
never the data. A table calls :meth:`Sampler.bind` once, :meth:`Sampler.on_add`
after every write, :meth:`Sampler.on_clear` on ``clear`` and
:meth:`Sampler.sample` to draw windows.

Every subclass registers itself under its class name (or its ``name`` class
attribute), so a checkpoint names the sampler and loading resolves that name
among the registered classes: nothing is imported on a manifest's say-so. A
user's sampler must be imported (defined) before a checkpoint using it loads.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar

import numpy as np

from recollect.arguments import no_options
from recollect.errors import InvalidArgumentError
from recollect.samplers.windows import Segments, WindowIndex

__all__ = ["Sampler", "WindowDraw", "importance_weights", "registered_sampler"]

_REGISTRY: dict[str, type[Sampler]] = {}


@dataclasses.dataclass(frozen=True)
class WindowDraw:
    """Windows chosen by a sampler.

    Attributes:
        rows: int64 ``[B]`` env row of each window.
        times: int64 ``[B]`` row step time of each window's first step.
        probabilities: float64 ``[B]`` probability with which each window was drawn.
        table_size: number of windows the draw chose among (``N`` of the importance weights).
        weights: float64 ``[B]`` importance weights, or None for samplers without.
        priorities: float64 ``[B]`` priority of each window, or None (then 1.0).
        ids: int64 ``[B]`` the windows' ids in shard 0 (``ids.encode(rows, times)``), when
            the sampler computed them anyway, or None (the table encodes them).
    """

    rows: np.ndarray
    times: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None
    table_size: int = 0
    priorities: np.ndarray | None = None
    ids: np.ndarray | None = None


def importance_weights(
    probabilities: Any, table_size: Any, beta: float, min_probability: float | None = None
) -> np.ndarray:
    """Importance weights ``w_i = (N * P(i))^-beta`` normalised (Schaul et al. 2016, eq. 1).

    Computed from what every sample carries (Reverb ``SampleInfo``:
    ``probability`` and ``table_size``), so a client can weight a batch drawn
    from several shards with global probabilities and the global table size.

    Args:
        probabilities: float ``[B]`` probability of each drawn window (> 0).
        table_size: ``N``, the number of windows sampled among (scalar or ``[B]``).
        beta: the exponent >= 0; 0 gives weights 1, 1 corrects the bias fully.
        min_probability: ``P_min``, the smallest probability of any stored window:
            the weights are then divided by ``(N * P_min)^-beta``, the largest
            weight any window can get (cpprb, OpenAI baselines, TorchRL,
            Tianshou). None divides by the batch's largest weight (Dopamine).

    Returns:
        float64 ``[B]`` weights in ``(0, 1]``.
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if min_probability is not None:
        return np.power(probabilities / min_probability, -beta)
    weights = np.power(np.multiply(table_size, probabilities, dtype=np.float64), -beta)
    return weights / weights.max()


def registered_sampler(name: str) -> type[Sampler]:
    """The sampler class registered as ``name``.

    Raises:
        InvalidArgumentError: no sampler of that name is defined in this process.
    """
    cls = _REGISTRY.get(name)
    if cls is None:
        raise InvalidArgumentError(
            f"no sampler class named {name!r} is registered (known: {sorted(_REGISTRY)}). "
            "Import the module that defines it before loading."
        )
    return cls


class Sampler:
    """Base class; subclasses implement :meth:`sample` and may track writes.

    A sampler instance serves one table: :meth:`bind` raises when it is
    already bound to another one (pass a fresh instance, or ``copy()`` it).
    """

    #: Window length fixed at construction (prioritized samplers), or None.
    sequence_length: int | None = None
    #: Whether the table is episode-aware (its spec has ``is_last``), told at :meth:`bind`.
    episode_aware: bool = False
    #: Name under which the class is registered (default: the class name).
    name: ClassVar[str] = "Sampler"
    #: Whether :meth:`sample` is a deterministic order (Fifo, Lifo, heaps): ``sample(k)``
    #: returns the first ``k`` windows of that order, and a table fills a batch as Reverb
    #: does, one selection per item (the first window ``b`` times unless
    #: ``max_times_sampled`` removes it; see :mod:`recollect.table.selection`).
    deterministic: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__
        _REGISTRY[cls.name] = cls

    def bind(
        self, index: WindowIndex, sequence_length: int | None, *, episode_aware: bool = False
    ) -> None:
        """Attaches the sampler to a table's window index.

        ``episode_aware``: whether the table's windows stop at ``is_last`` (its spec has an
        ``is_last`` leaf). The table decides it; a sampler never infers it from its writes.

        Raises:
            InvalidArgumentError: the sampler already serves another table.
        """
        bound = getattr(self, "index", None)
        if bound is not None and bound is not index:
            raise InvalidArgumentError(
                f"this {type(self).__name__} sampler already serves another buffer; a sampler "
                "keeps per-buffer state. Pass a new instance (or sampler.copy()) to each buffer."
            )
        self.index = index
        self.sequence_length = sequence_length
        self.episode_aware = bool(episode_aware)

    def estimate_nbytes(self, num_envs: int, max_length: int) -> int:
        """Bytes this sampler allocates when bound to a table of that geometry (0: none)."""
        return 0

    @property
    def nbytes(self) -> int:
        """Bytes of the sampler's per-table arrays (equals :meth:`estimate_nbytes`)."""
        return 0

    def copy(self) -> Sampler:
        """A new, unbound sampler with the same configuration."""
        return type(self)(**self.get_config())

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able) that rebuild this sampler, state excluded.

        The default reads each ``__init__`` parameter back from a same-named
        attribute ``x`` (or ``_x``); override it when they are not kept.

        Raises:
            InvalidArgumentError: a required argument cannot be read back.
        """
        config = {}
        params = inspect.signature(type(self).__init__).parameters
        for name, param in list(params.items())[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            for attr in (name, f"_{name}"):
                if hasattr(self, attr):
                    config[name] = getattr(self, attr)
                    break
            else:
                if param.default is param.empty:
                    raise InvalidArgumentError(
                        f"cannot checkpoint {type(self).__name__}: constructor argument "
                        f"{name!r} is not readable back; give the sampler a get_config() method."
                    )
        return config

    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        """Called after step ``index.t[r] - 1`` was written to each row ``r`` of ``rows``.

        ``rows`` None means every row; ``is_last`` is bool, one per written row, or None
        (always None, and only then, when the table is not episode-aware).
        """

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        """Called after ``count`` (<= ``max_length``) steps were written to each row of ``rows``
        (``ReplayBuffer.extend``); must equal ``count`` calls of :meth:`on_add`.

        ``is_last`` is bool ``[len(rows), count]`` (``[num_envs, count]`` for None) or
        None (as in :meth:`on_add`). A sampler that overrides :meth:`on_add` but not this
        hook gets its writes one step at a time.
        """

    def on_clear(self) -> None:
        """Called after the table forgot its steps."""

    def on_end_episodes(self, rows: np.ndarray) -> None:
        """Called after the table ended the episode at the newest step of ``rows``
        (:meth:`WindowIndex.end_episodes <recollect.samplers.windows.WindowIndex.end_episodes>`)."""

    def sampling_weight(self, num_steps: int, within_episode: bool) -> tuple[float, int]:
        """``(weight, table_size)``: this table's share of a draw over several shards.

        A client splits a batch over shards in proportion to their weights
        (uniform sampling: the number of valid windows, so the default returns
        it twice; prioritized: the sum of the windows' sampling values).
        """
        size = self.index.count(num_steps, within_episode)
        return float(size), size

    def on_remove(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Called after the table removed the windows starting at ``(rows, times)``
        (``max_times_sampled``). Samplers drawing from ``index.segments`` see it there."""

    def drop_before(self, times: np.ndarray) -> None:
        """Forgets the windows of each row ``r`` that start before ``times[r]`` (int64
        ``[num_envs]``): called after the table's index cleared those steps (a memmap
        buffer recovered at its last flush drops the steps the later writes overwrote).

        The default does nothing: samplers that draw from ``index.segments`` see the
        cleared index. Samplers that keep per-window state (:class:`~recollect.Prioritized`)
        zero those windows.
        """

    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        **kwargs: Any,
    ) -> WindowDraw:
        """Draws ``batch_size`` valid windows of ``num_steps`` steps.

        The caller has checked that at least one valid window exists. This default takes
        no options (``InvalidArgumentError`` on any) and hands the valid windows of
        ``index.segments`` to :meth:`_draw`; samplers with options or per-window state
        (:class:`~recollect.Prioritized`) override it.
        """
        no_options(f"{type(self).__name__} sampling", kwargs)
        return self._draw(self.index.segments(num_steps, within_episode), batch_size, rng)

    def _draw(self, segments: Segments, batch_size: int, rng: np.random.Generator) -> WindowDraw:
        """``batch_size`` windows out of ``segments`` (the valid windows, ``total >= 1``)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Arrays and scalars that restore the sampler exactly (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""
