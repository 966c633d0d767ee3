"""Double DQN with a target network, trained from a :class:`recollect.ReplayBuffer`.

A single-file reference implementation in the style of cleanRL's ``dqn.py``;
``recollect demo`` runs it on ``CartPole-v1``. The replay code is the
library's: steps go into a ``ReplayBuffer`` through an observer, training
batches come back as windows of two steps (``num_steps=2``) and reach torch
through :func:`recollect.torch.as_tensors`.

Steps follow the RLDS layout, one per env per vector step::

    observation  o_t        float32 [*obs_shape]
    action       a_t        int64   []    (ignored by the env on the final step)
    reward       r_t        float32 []    reward that followed a_t (0 on the final step)
    discount     d_t        float32 []    0 when a_t ended the episode in a terminal state
    is_first, is_last, is_terminal  bool []

Steps come from :class:`recollect.drivers.VectorEnvDriver` (imported here as
``Driver``): gymnasium 1.x vector envs autoreset in ``NEXT_STEP`` mode, where
the step after ``terminated or truncated`` ignores the action and returns the
reset observation with reward 0. That step is exactly the RLDS final step: its
observation is the episode's last observation, it has ``is_last=True`` and
``is_terminal=terminated``. A truncated episode ends with ``is_last`` but not
``is_terminal`` (and ``d = 1``), so its last transition still bootstraps.
Because windows never contain an ``is_last`` step before their last step, a
window ``[step_t, step_t+1]`` never pairs a final observation with the reset
observation of the next episode; the TD target is
``r_t + gamma * d_t * Q_target(o_t+1, argmax_a Q(o_t+1, a))``.

Stopping: training runs for at most ``total_steps`` env steps. Every
``eval_every`` env steps a greedy evaluation over ``eval_episodes`` episodes
runs; the network with the best evaluation mean is kept, and training stops
early once every evaluation episode reaches ``stop_return`` (default: the
env's ``reward_threshold``, 475 for CartPole-v1). DQN on CartPole is known to
oscillate after solving; keeping the evaluated network makes the result
reproducible instead of depending on where the last update landed.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import recollect
from recollect.collect.drivers import VectorEnvDriver as Driver
from recollect.errors import InvalidArgumentError

__all__ = [
    "Config",
    "Driver",
    "EpisodeStats",
    "Learner",
    "Result",
    "double_dqn_loss",
    "double_dqn_td",
    "epsilon_greedy",
    "evaluate",
    "make_env",
    "q_network",
    "rlds_spec",
    "space_sizes",
    "train",
]


@dataclasses.dataclass
class Config:
    """Hyperparameters; every ``*_steps`` and ``*_every`` counts env steps (all envs together).

    The defaults follow the rl-baselines3-zoo CartPole DQN (few large training
    phases: 128 updates every 256 env steps, the target network copied once
    per phase) with a 2x128 MLP and one torch thread.
    """

    env_id: str = "CartPole-v1"
    total_steps: int = 100_000  # upper bound; training stops once solved
    num_envs: int = 4
    batch_size: int = 64
    capacity: int = 100_000
    seed: int = 2
    device: str = "cpu"
    learning_rate: float = 2.3e-3
    gamma: float = 0.99
    hidden_size: int = 128
    learning_starts: int = 1_000
    train_every: int = 256  # env steps between training phases
    gradient_steps: int = 128  # updates per training phase
    target_update_every: int = 128  # updates between target network copies
    max_grad_norm: float = 10.0
    epsilon_start: float = 1.0
    epsilon_end: float = 0.04
    exploration_steps: int = 8_000
    eval_every: int = 2_000
    eval_episodes: int = 20
    stop_return: float | None = None  # None: the env's reward_threshold


@dataclasses.dataclass
class Result:
    """What :func:`train` returns: the kept network, the buffer and the logs."""

    q_network: nn.Module
    buffer: recollect.ReplayBuffer
    env_steps: int
    updates: int
    episodes: list[tuple[int, float, int]]  # (env steps at the end, return, length)
    evaluations: list[tuple[int, float]]  # (env steps, mean greedy return)
    stopped_early: bool
    train_seconds: float


def make_env(env_id: str, num_envs: int, seed: int | None = None) -> gym.vector.VectorEnv:
    """A gymnasium vector env with a discrete action space and a Box observation space.

    Raises:
        InvalidArgumentError: unknown env id, a non-discrete action space or a
            non-Box observation space (one-line messages meant for the CLI).
    """
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as err:
        raise InvalidArgumentError(
            f"unknown environment id {env_id!r}: {err} Try CartPole-v1 or Acrobot-v1."
        ) from None
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
    act, obs = env.single_action_space, env.single_observation_space
    if not isinstance(act, gym.spaces.Discrete):
        env.close()
        raise InvalidArgumentError(
            f"{env_id} has a {type(act).__name__} action space ({act}); DQN needs a Discrete "
            "action space, e.g. CartPole-v1 or Acrobot-v1."
        )
    if not isinstance(obs, gym.spaces.Box):
        env.close()
        raise InvalidArgumentError(
            f"{env_id} has a {type(obs).__name__} observation space; this DQN needs a Box."
        )
    if seed is not None:
        env.action_space.seed(seed)
    return env


def space_sizes(env: gym.vector.VectorEnv) -> tuple[tuple[int, ...], int]:
    """``(observation shape, number of actions)`` of an env :func:`make_env` accepts.

    Raises:
        InvalidArgumentError: the action space is not Discrete or the observation
            space has no shape.
    """
    act, obs = env.single_action_space, env.single_observation_space
    if not isinstance(act, gym.spaces.Discrete) or obs.shape is None:
        raise InvalidArgumentError(
            f"DQN needs a Discrete action space and a Box observation space; got "
            f"{type(act).__name__} and {type(obs).__name__} (use make_env)."
        )
    return obs.shape, int(act.n)


def rlds_spec(env: gym.vector.VectorEnv) -> dict[str, recollect.ArraySpec]:
    """The RLDS step spec for ``env``'s single observation space and a discrete action."""
    scalar = recollect.ArraySpec((), np.float32)
    flag = recollect.ArraySpec((), np.bool_)
    return {
        "observation": recollect.ArraySpec(space_sizes(env)[0], np.float32),
        "action": recollect.ArraySpec((), np.int64),
        "reward": scalar,
        "discount": scalar,
        "is_first": flag,
        "is_last": flag,
        "is_terminal": flag,
    }


class EpisodeStats:
    """Observer that sums rewards per env row and logs ``(env_steps, return, length)``."""

    def __init__(self, num_envs: int):
        self._return = np.zeros(num_envs)
        self._length = np.zeros(num_envs, np.int64)
        self.env_steps = 0
        self.episodes: list[tuple[int, float, int]] = []

    def __call__(self, steps: dict[str, np.ndarray]) -> None:
        last = steps["is_last"]
        self._return += np.where(last, 0.0, steps["reward"])
        self._length += ~last
        self.env_steps += last.size
        for i in np.flatnonzero(last):
            self.episodes.append((self.env_steps, float(self._return[i]), int(self._length[i])))
        self._return[last], self._length[last] = 0.0, 0

    def recent_mean(self, n: int = 20) -> float:
        """Mean return of the last ``n`` finished episodes (nan before the first)."""
        recent = [r for _, r, _ in self.episodes[-n:]]
        return float(np.mean(recent)) if recent else float("nan")


def q_network(obs_dim: int, num_actions: int, hidden: int) -> nn.Sequential:
    """A two-hidden-layer MLP ``[batch, obs_dim] -> [batch, num_actions]``."""
    return nn.Sequential(
        nn.Linear(obs_dim, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, num_actions),
    )  # fmt: skip


def double_dqn_td(
    q: nn.Module, target: nn.Module, batch: dict, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q(o_t, a_t), TD target)``, float ``[batch]`` each, on windows of two steps."""
    obs, next_obs = batch["observation"][:, 0], batch["observation"][:, 1]
    action = batch["action"][:, 0]
    with torch.no_grad():
        next_action = q(next_obs).argmax(dim=1, keepdim=True)
        next_q = target(next_obs).gather(1, next_action).squeeze(1)
        td_target = batch["reward"][:, 0] + gamma * batch["discount"][:, 0] * next_q
    return q(obs).gather(1, action.unsqueeze(1)).squeeze(1), td_target


def double_dqn_loss(q: nn.Module, target: nn.Module, batch: dict, gamma: float) -> torch.Tensor:
    """Huber TD loss on windows of two steps; leaves are ``[batch, 2, ...]`` tensors."""
    return F.smooth_l1_loss(*double_dqn_td(q, target, batch, gamma))


@torch.no_grad()
def epsilon_greedy(
    q: nn.Module, obs: np.ndarray, epsilon: float, rng: np.random.Generator, device: str = "cpu"
) -> np.ndarray:
    """Epsilon-greedy actions int64 [num_envs] of ``q`` for observations [num_envs, *obs_shape]."""
    x = torch.as_tensor(np.asarray(obs, np.float32), device=device)
    values = q(x)  # [num_envs, num_actions]
    greedy = values.argmax(dim=1).cpu().numpy()
    random = rng.integers(0, values.shape[1], size=greedy.shape)
    return np.where(rng.random(greedy.shape) < epsilon, random, greedy)


@torch.no_grad()
def evaluate(
    q: nn.Module, env_id: str, episodes: int, seed: int, device: str = "cpu"
) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes run side by side (float64 [episodes])."""
    env = make_env(env_id, episodes)
    obs, _ = env.reset(seed=seed)
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        x = torch.as_tensor(np.asarray(obs, np.float32), device=device)
        obs, reward, terminated, truncated, _ = env.step(q(x).argmax(dim=1).cpu().numpy())
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    env.close()
    return returns


class Learner:
    """The Q-network, its target copy and Adam; ``update`` does one Double DQN step."""

    def __init__(self, env: gym.vector.VectorEnv, cfg: Config):
        obs_shape, num_actions = space_sizes(env)
        obs_dim = int(np.prod(obs_shape))
        self.q = q_network(obs_dim, num_actions, cfg.hidden_size).to(cfg.device)
        self.target = copy.deepcopy(self.q)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=cfg.learning_rate)
        self.cfg, self.updates = cfg, 0
        self._loss: torch.Tensor | None = None

    @property
    def loss(self) -> float:
        """The last update's loss (nan before the first update)."""
        return float("nan") if self._loss is None else float(self._loss)

    def act(self, obs: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
        """Epsilon-greedy actions int64 [num_envs] for observations [num_envs, *obs_shape]."""
        return epsilon_greedy(self.q, obs, epsilon, rng, self.cfg.device)

    def update(self, buffer: recollect.ReplayBuffer) -> None:
        """One gradient step on a batch of windows of two steps sampled from ``buffer``."""
        self.learn(buffer.sample(self.cfg.batch_size, num_steps=2).data)

    def learn(self, data: Any, weights: np.ndarray | None = None) -> torch.Tensor:
        """One gradient step on ``data`` (windows of two steps, numpy leaves ``[batch, 2, ...]``).

        Args:
            data: the sample's data.
            weights: importance weights float ``[batch]`` of a prioritized sample
                (None: every window weighs 1).

        Returns:
            The absolute TD errors float32 ``[batch]`` (new priorities), on the device.
        """
        batch = recollect.torch.as_tensors(data, device=self.cfg.device)
        q_taken, td_target = double_dqn_td(self.q, self.target, batch, self.cfg.gamma)
        if weights is None:
            loss = F.smooth_l1_loss(q_taken, td_target)
        else:
            w = torch.as_tensor(weights, dtype=q_taken.dtype, device=self.cfg.device)
            loss = (w * F.smooth_l1_loss(q_taken, td_target, reduction="none")).mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self._loss = loss.detach()  # read lazily: no device sync per update
        if self.updates % self.cfg.target_update_every == 0:
            self.target.load_state_dict(self.q.state_dict())
        return (td_target - q_taken).detach().abs()


def _due(steps_done: int, every: int, num_envs: int) -> bool:
    """Whether a multiple of ``every`` env steps was crossed by the last vector step."""
    return steps_done % every < num_envs


def train(cfg: Config, progress: Callable[[dict[str, Any]], None] | None = None) -> Result:
    """Trains a Double DQN per ``cfg``; ``progress(info)`` is called after every vector step.

    Raises:
        InvalidArgumentError: see :func:`make_env`, and buffer arguments
            (``capacity`` not a multiple of ``num_envs``).
    """
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.env_id, cfg.num_envs, cfg.seed)
    stop_return = cfg.stop_return
    if stop_return is None and env.spec is not None:
        stop_return = env.spec.reward_threshold
    buffer = recollect.ReplayBuffer(rlds_spec(env), cfg.capacity, cfg.num_envs, rng=cfg.seed)
    stats = EpisodeStats(cfg.num_envs)
    driver = Driver(env, [buffer.add_batch, stats], seed=cfg.seed)
    learner, rng = Learner(env, cfg), np.random.default_rng(cfg.seed)
    best, best_state, evaluations, stopped_early = -np.inf, None, [], False
    start = time.perf_counter()
    for it in range(-(-cfg.total_steps // cfg.num_envs)):
        eps = np.interp(it * cfg.num_envs, [0, cfg.exploration_steps],
                        [cfg.epsilon_start, cfg.epsilon_end])  # fmt: skip
        driver.step(learner.act(driver.obs, eps, rng))
        steps_done = (it + 1) * cfg.num_envs
        learning = steps_done >= cfg.learning_starts
        if learning and _due(steps_done, cfg.train_every, cfg.num_envs):
            for _ in range(cfg.gradient_steps):
                learner.update(buffer)
        if learning and _due(steps_done, cfg.eval_every, cfg.num_envs):
            eval_seed = cfg.seed + 1_000_000 + steps_done  # disjoint from the final evaluation
            returns = evaluate(learner.q, cfg.env_id, cfg.eval_episodes, eval_seed, cfg.device)
            evaluations.append((steps_done, float(returns.mean())))
            stopped_early = stop_return is not None and bool(returns.min() >= stop_return)
            if returns.mean() > best or stopped_early:  # the stopping network is the one kept
                best, best_state = returns.mean(), copy.deepcopy(learner.q.state_dict())
        if progress is not None:
            progress({"env_steps": steps_done, "episodes": len(stats.episodes),
                      "recent_return": stats.recent_mean(), "loss": learner.loss})  # fmt: skip
        if stopped_early:
            break
    env.close()
    if best_state is not None:
        learner.q.load_state_dict(best_state)
    return Result(learner.q, buffer, stats.env_steps, learner.updates, stats.episodes,
                  evaluations, stopped_early, time.perf_counter() - start)  # fmt: skip
