"""Ape-X DQN (Horgan et al. 2018) on a served prioritized table: ``recollect demo --distributed``.

The distributed twin of :mod:`recollect.examples.dqn`, whose network, loss,
env and step layout it reuses. Pieces:

- one prioritized table (``sequence_length=2``, proportional priorities,
  a :class:`~recollect.SampleToInsertRatio` rate limiter) served by
  :func:`recollect.ray.serve`;
- ``num_actors`` Ray actor processes, each stepping a gymnasium vector env
  with an epsilon-greedy copy of the Q-network (actor ``i`` of ``N`` explores
  with ``epsilon_i = 0.4 ** (1 + 7 i / (N - 1))``, annealed from 1 over its
  first ``exploration_steps`` steps) and writing its steps through a
  :class:`~recollect.service.Writer`; they pull the learner's newest weights
  every ``weights_every`` vector steps;
- the learner (the calling process) trains Double DQN on prioritized batches
  weighted by importance weights, keeps one sample request in flight on a
  background thread, and sends ``|TD error|`` back as new priorities without
  waiting (``update_priorities(wait=False)``).

The rate limiter keeps ``samples / inserts`` near ``samples_per_insert``:
actors block (their writers wait on the shard) when the learner falls
behind, and the learner blocks when actors do, so the run behaves the same
on 2 cores or 32. Ray must be initialised by the caller, on one machine on
loopback: ``ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False)``.
Stopping and the kept network are as in :func:`recollect.examples.dqn.train`.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import torch

import recollect
import recollect.ray
from recollect.errors import RateLimiterTimeout, StateError
from recollect.examples import dqn
from recollect.table import TableInfo

__all__ = ["ApexConfig", "ApexResult", "SamplePrefetcher", "actor_epsilons", "train"]

#: name of the prioritized table
TABLE = "replay"


@dataclasses.dataclass
class ApexConfig(dqn.Config):
    """:class:`~recollect.examples.dqn.Config` plus the distributed knobs.

    ``total_steps`` bounds the env steps of all actors together;
    ``exploration_steps`` counts each actor's own steps (its epsilon falls
    from ``epsilon_start`` to its Ape-X value over them); ``eval_every``
    counts learner updates here. ``learning_starts``, ``train_every``,
    ``gradient_steps`` and ``epsilon_end`` are not used: the rate limiter
    (``min_size_to_sample``, ``samples_per_insert``) and the per-actor
    epsilons take their place.
    """

    num_actors: int = 4
    envs_per_actor: int = 4
    samples_per_insert: float = 16.0  # sampled windows per inserted step
    min_size_to_sample: int = 1_000
    prioritized: bool = True  # False: uniform sampling (no priority updates)
    priority_exponent: float = 0.6
    importance_sampling_exponent: float = 0.4
    chunk_length: int = 8  # steps per env row sent in one writer request
    weights_every: int = 50  # actor vector steps between weight pulls
    publish_every: int = 50  # learner updates between weight broadcasts
    exploration_steps: int = 2_000
    eval_every: int = 1_000  # learner updates between evaluations
    max_seconds: float = 900.0


@dataclasses.dataclass
class ApexResult:
    """What :func:`train` returns; ``episodes`` and ``evaluations`` as in ``dqn.Result``."""

    q_network: torch.nn.Module
    env_steps: int
    updates: int
    episodes: list[tuple[int, float, int]]  # (table inserts when reported, return, length)
    evaluations: list[tuple[int, float]]  # (table inserts, mean greedy return)
    stopped_early: bool
    train_seconds: float
    rates: list[tuple[float, int, int]]  # (seconds since start, inserts, samples)
    info: TableInfo  # the table's final info


def actor_epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X exploration rates ``base ** (1 + alpha * i / (N - 1))`` of ``N`` actors."""
    if num_actors == 1:
        return np.array([base])
    return base ** (1 + alpha * np.arange(num_actors) / (num_actors - 1))


def _state_arrays(q: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in q.state_dict().items()}


class Actor:
    """One actor process: a vector env, a Q-network copy and a writer (a Ray actor body)."""

    def __init__(self, service: str, cfg: ApexConfig, index: int, seed: int, epsilon: float):
        torch.set_num_threads(1)
        self.cfg, self.epsilon, self.seed = cfg, float(epsilon), seed
        self.env = dqn.make_env(cfg.env_id, cfg.envs_per_actor, seed)
        obs_shape, num_actions = dqn.space_sizes(self.env)
        self.q = dqn.q_network(int(np.prod(obs_shape)), num_actions, cfg.hidden_size)
        self.client = recollect.ray.connect(service)
        self.stats = dqn.EpisodeStats(cfg.envs_per_actor)
        self._weights: Any = None
        self._reported = 0
        self._stop = threading.Event()

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Keeps the learner's newest weights; the run loop loads them at its next pull."""
        self._weights = weights

    def stop(self) -> None:
        self._stop.set()

    def episodes(self) -> list[tuple[float, int]]:
        """``(return, length)`` of the episodes finished since the last call."""
        new = self.stats.episodes[self._reported :]
        self._reported += len(new)
        return [(r, n) for _, r, n in new]

    def run(self) -> int:
        """Acts and writes until :meth:`stop`; returns the env steps taken."""
        cfg, rng = self.cfg, np.random.default_rng(self.seed)
        # max_in_flight=1: a shard may apply a writer's concurrent chunks out of order when
        # they wait on its rate limiter, which would scramble the rows' time order
        writer = self.client.writer(
            TABLE, cfg.envs_per_actor, chunk_length=cfg.chunk_length, max_in_flight=1
        )
        with writer as w:
            driver = dqn.Driver(self.env, [w.add_batch, self.stats], seed=self.seed)
            it = 0
            while not self._stop.is_set():
                if it % cfg.weights_every == 0 and self._weights is not None:
                    weights = self._weights
                    self.q.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
                steps = it * cfg.envs_per_actor
                eps = np.interp(
                    steps, [0, cfg.exploration_steps], [cfg.epsilon_start, self.epsilon]
                )
                driver.step(dqn.epsilon_greedy(self.q, driver.obs, eps, rng))
                it += 1
        return self.stats.env_steps


class SamplePrefetcher:
    """Keeps one ``client.sample`` request in flight on a thread, so sampling overlaps learning.

    Iterate it for :class:`~recollect.Sample` values; :meth:`close` stops the
    thread (a request blocked by the rate limiter ends within ``poll_s``).
    A sampling error is raised by the next ``next()``.
    """

    def __init__(self, client: Any, table: str, batch_size: int, num_steps: int,
                 depth: int = 1, poll_s: float = 0.5):  # fmt: skip
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        args = (client, table, batch_size, num_steps, poll_s)
        self._thread = threading.Thread(target=self._fill, args=args, daemon=True)
        self._thread.start()

    def _fill(self, client: Any, table: str, batch: int, num_steps: int, poll_s: float) -> None:
        while not self._stop.is_set():
            try:
                item: Any = client.sample(table, batch, num_steps, timeout=poll_s)
            except RateLimiterTimeout:
                continue
            except Exception as err:  # carried to the consumer
                item = err
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=poll_s)
                    break
                except queue.Full:
                    continue
            if isinstance(item, Exception):
                return

    def __iter__(self) -> SamplePrefetcher:
        return self

    def __next__(self) -> recollect.Sample:
        sample = self.get()
        assert sample is not None  # without a timeout, get() waits for a sample
        return sample

    def get(self, timeout_s: float | None = None) -> recollect.Sample | None:
        """The next sample, or None when none came within ``timeout_s`` (None: wait)."""
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def make_table(cfg: ApexConfig, env: Any) -> recollect.ReplayBuffer:
    """The empty prioritized, rate-limited table that :func:`train` serves."""
    limiter = recollect.SampleToInsertRatio(
        cfg.samples_per_insert,
        cfg.min_size_to_sample,
        # room for every actor's chunk in flight plus a few batches
        cfg.samples_per_insert * cfg.num_actors * cfg.envs_per_actor * cfg.chunk_length * 8
        + cfg.batch_size * 8,
    )
    sampler: recollect.Sampler = recollect.Uniform()
    if cfg.prioritized:
        sampler = recollect.Prioritized(
            cfg.priority_exponent, importance_sampling_exponent=cfg.importance_sampling_exponent
        )
    num_envs = cfg.num_actors * cfg.envs_per_actor
    capacity = cfg.capacity - cfg.capacity % num_envs
    spec = dqn.rlds_spec(env)
    return recollect.ReplayBuffer(spec, capacity, num_envs, sampler=sampler, sequence_length=2,
                                  rate_limiter=limiter, rng=cfg.seed)  # fmt: skip


def _start_actors(cfg: ApexConfig, service: str) -> list[Any]:
    remote = ray.remote(Actor)
    seeds = np.random.SeedSequence(cfg.seed).spawn(cfg.num_actors)
    return [
        remote.options(num_cpus=0, max_concurrency=3).remote(
            service, cfg, i, int(seeds[i].generate_state(1)[0]), eps
        )
        for i, eps in enumerate(actor_epsilons(cfg.num_actors))
    ]


class _Run:
    """The learner's loop state: logs, rates, the best evaluated network."""

    def __init__(self, cfg: ApexConfig, client: Any, actors: list[Any], runs: list[Any]):
        self.cfg, self.client, self.actors, self.runs = cfg, client, actors, runs
        self.start = time.perf_counter()
        self.episodes: list[tuple[int, float, int]] = []
        self.evaluations: list[tuple[int, float]] = []
        self.rates: list[tuple[float, int, int]] = []
        self.best, self.solved = -np.inf, False
        self.best_state: dict[str, Any] | None = None

    def poll(self) -> TableInfo:
        """Reads the table's counters and the actors' finished episodes."""
        info = self.client.info(TABLE)
        self.rates.append((time.perf_counter() - self.start, info.inserts, info.samples))
        for eps in ray.get([a.episodes.remote() for a in self.actors]):
            self.episodes.extend((info.inserts, r, n) for r, n in eps)
        return info

    def check_actors(self) -> None:
        """Raises the error of an actor whose run ended (they run until stopped).

        Raises:
            StateError: an actor's run returned early.
        """
        ended, _ = ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        if ended:
            ray.get(ended)  # raises the actor's error
            raise StateError(f"{len(ended)} actor(s) stopped before the learner did.")

    def evaluate(self, q: torch.nn.Module, inserts: int, stop_return: float | None) -> None:
        cfg = self.cfg
        seed = cfg.seed + 1_000_000 + len(self.evaluations)  # disjoint from the final evaluation
        returns = dqn.evaluate(q, cfg.env_id, cfg.eval_episodes, seed, cfg.device)
        self.evaluations.append((inserts, float(returns.mean())))
        self.solved = stop_return is not None and bool(returns.min() >= stop_return)
        if returns.mean() > self.best or self.solved:
            self.best, self.best_state = returns.mean(), copy.deepcopy(q.state_dict())

    def recent_return(self, n: int = 20) -> float:
        recent = [r for _, r, _ in self.episodes[-n:]]
        return float(np.mean(recent)) if recent else float("nan")


def train(cfg: ApexConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> ApexResult:
    """Trains Ape-X DQN per ``cfg`` on the running Ray cluster.

    ``progress(info)`` is called about twice a second with ``env_steps``
    (table inserts), ``inserts_per_s``, ``samples_per_s``,
    ``samples_per_insert``, ``episodes``, ``recent_return``, ``loss``,
    ``updates`` and ``last_eval``.

    Raises:
        InvalidArgumentError: see :func:`recollect.examples.dqn.make_env`.
    """
    torch.manual_seed(cfg.seed)
    env = dqn.make_env(cfg.env_id, 1)
    stop_return = cfg.stop_return
    if stop_return is None and env.spec is not None:
        stop_return = env.spec.reward_threshold
    learner, table = dqn.Learner(env, cfg), make_table(cfg, env)
    env.close()
    name = f"apex-{uuid.uuid4().hex[:8]}"
    client = recollect.ray.serve({TABLE: table}, name=name, rng=cfg.seed)
    # the sampling thread gets a Client of its own: a Client is not thread-safe (its queue
    # of pending priority updates is shared by sample and update_priorities)
    actors, prefetch, sampler_client = [], None, recollect.ray.connect(name)
    try:
        actors = _start_actors(cfg, name)
        ray.get([a.set_weights.remote(_state_arrays(learner.q)) for a in actors])
        run = _Run(cfg, client, actors, [a.run.remote() for a in actors])
        prefetch = SamplePrefetcher(sampler_client, TABLE, cfg.batch_size, 2)
        with warnings.catch_warnings():  # samples from Ray are read-only; torch only reads them
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            _learn(run, learner, prefetch, stop_return, progress)
        info = run.poll()
        ray.get([a.stop.remote() for a in actors])
        ray.wait(run.runs, num_returns=len(run.runs), timeout=2.0)
    finally:
        if prefetch is not None:
            prefetch.close()
        for a in actors:
            ray.kill(a)
        sampler_client.close()
        client.close()
    if run.best_state is not None:
        learner.q.load_state_dict(run.best_state)
    return ApexResult(learner.q, info.inserts, learner.updates, run.episodes, run.evaluations,
                      run.solved, time.perf_counter() - run.start, run.rates, info)  # fmt: skip


Progress = Callable[[dict[str, Any]], None]


def _learn(
    run: _Run, learner: dqn.Learner, prefetch: SamplePrefetcher, stop_return: float | None,
    progress: Progress | None,
) -> None:  # fmt: skip
    cfg, client, actors = run.cfg, run.client, run.actors
    info, last_poll, inserts = run.poll(), time.perf_counter(), 0
    while True:
        sample = prefetch.get(timeout_s=1.0)
        if sample is None:  # actors blocked or gone: check, and keep the time limit
            run.check_actors()
            if time.perf_counter() - run.start > cfg.max_seconds:
                break
            continue
        td = learner.learn(sample.data, sample.weights)
        if cfg.prioritized:
            client.update_priorities(TABLE, sample.ids, td.cpu().numpy() + 1e-3)
        if learner.updates % cfg.publish_every == 0:
            weights = ray.put(_state_arrays(learner.q))
            for a in actors:
                a.set_weights.remote(weights)
        if learner.updates % cfg.eval_every == 0:
            run.evaluate(learner.q, inserts, stop_return)
        now = time.perf_counter()
        if now - last_poll > 0.5 or run.solved:
            info, last_poll = run.poll(), now
            inserts = info.inserts
            if progress is not None:
                progress(_progress_info(run, info, learner))
        done = inserts >= cfg.total_steps or now - run.start > cfg.max_seconds
        if run.solved or done:
            break


def _progress_info(run: _Run, info: TableInfo, learner: dqn.Learner) -> dict[str, Any]:
    """Counters of the last few seconds' rates for the progress bar."""
    t, ins, smp = run.rates[-1]
    t0, ins0, smp0 = run.rates[max(0, len(run.rates) - 10)]
    dt = max(t - t0, 1e-9)
    return {
        "env_steps": info.inserts,
        "inserts_per_s": (ins - ins0) / dt,
        "samples_per_s": (smp - smp0) / dt,
        "samples_per_insert": info.samples_per_insert,
        "episodes": len(run.episodes),
        "recent_return": run.recent_return(),
        "loss": learner.loss,
        "updates": learner.updates,
        "last_eval": run.evaluations[-1][1] if run.evaluations else float("nan"),
    }
