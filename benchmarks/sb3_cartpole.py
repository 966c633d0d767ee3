"""SB3 DQN on CartPole-v1 (rl-zoo hyperparameters): SB3's buffer vs recollect.sb3 buffers.

Trains, per seed, SB3's ``DQN`` with its own ``ReplayBuffer``, the same DQN with
``replay_buffer_class=recollect.sb3.ReplayBuffer``, and ``recollect.sb3.DQN``
(prioritized replay). Every ``--eval-every`` env steps the greedy policy is
evaluated on ``--eval-episodes`` episodes; the final policy on 20. Writes one
PNG with the learning curves (mean over seeds, min-max band) and a JSON with
every number, and prints the final evaluations per seed.

    python benchmarks/sb3_cartpole.py --seeds 0 1 2 --out runs/sb3_cartpole

``--cleanrl`` runs CleanRL's ``dqn.py`` instead (its hyperparameters, a
gymnasium 1.x ``SyncVectorEnv`` of 1 env, ``rb.add(...)`` with the env's own
``infos`` every step, ``rb.sample(128)`` every 10th step), once with SB3's
``ReplayBuffer`` and once with ``recollect.sb3.ReplayBuffer`` (the only line
that differs); per seed the two agents advance in turns of 500 steps in one
process, so both share the machine's load. It
prints the mean return of the last 20 training episodes, a greedy evaluation
and the process CPU seconds of each run, and the CPU-time ratio::

    python benchmarks/sb3_cartpole.py --cleanrl --seeds 0 1 2 --steps 100000
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

# rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1
ZOO = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1_000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
}
ZOO_STEPS = 50_000
VARIANTS = ("sb3", "recollect", "recollect-per")


def evaluate(model: Any, episodes: int, seed: int) -> float:
    """Mean return of the greedy policy over ``episodes`` CartPole-v1 episodes."""
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def make_model(variant: str, seed: int) -> Any:
    """The DQN of ``variant`` (see ``VARIANTS``) with the rl-zoo hyperparameters."""
    from stable_baselines3 import DQN

    import recollect.sb3

    kwargs = dict(ZOO, policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu")
    if variant == "sb3":
        return DQN("MlpPolicy", "CartPole-v1", **kwargs)
    if variant == "recollect":
        cls = recollect.sb3.ReplayBuffer
        return DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=cls, **kwargs)
    if variant == "recollect-per":
        beta = recollect.LinearSchedule(0.4, 1.0, num_steps=ZOO_STEPS)
        return recollect.sb3.DQN(
            "MlpPolicy", "CartPole-v1", replay_buffer_kwargs={"beta": beta}, **kwargs
        )
    raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")


def run(variant: str, seed: int, steps: int, eval_every: int, eval_episodes: int) -> dict:
    """Trains one model in one ``learn`` call (so the exploration schedule is rl-zoo's).

    Returns its curve ``[(env steps, eval mean)]`` (evaluated every
    ``eval_every`` steps from a callback), the final evaluation and the time.
    """
    from stable_baselines3.common.callbacks import BaseCallback

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                self.curve.append((self.num_timesteps, evaluate(self.model, eval_episodes, seed)))
            return True

    th.set_num_threads(1)
    model = make_model(variant, seed)
    callback, t0 = Evaluate(), time.perf_counter()
    model.learn(steps, callback=callback)
    seconds = time.perf_counter() - t0
    final = evaluate(model, 20, seed + 1)
    return {
        "variant": variant,
        "seed": seed,
        "curve": callback.curve,
        "final": final,
        "seconds": seconds,
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in VARIANTS:
        runs = [r for r in results if r["variant"] == variant]
        if not runs:
            continue
        x = np.array([t for t, _ in runs[0]["curve"]])
        y = np.array([[v for _, v in r["curve"]] for r in runs])
        ax.plot(x, y.mean(axis=0), label=f"{variant} ({len(runs)} seeds)")
        ax.fill_between(x, y.min(axis=0), y.max(axis=0), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title("SB3 DQN, CartPole-v1, rl-zoo hyperparameters")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summary(r: dict) -> dict[str, float]:
    """Final eval, best eval, mean of the whole curve and of its second half, first step >= 475."""
    values = [v for _, v in r["curve"]]
    solved = [t for t, v in r["curve"] if v >= 475]
    return {
        "final": r["final"],
        "best": max(values),
        "curve_mean": float(np.mean(values)),
        "late_mean": float(np.mean(values[len(values) // 2 :])),
        "solved_at": solved[0] if solved else float("nan"),
    }


def report(results: list[dict], seeds: list[int], variants: list[str]) -> None:
    """Prints a markdown table per metric: one row per variant, one column per seed."""
    for metric in ("final", "best", "curve_mean", "late_mean", "solved_at"):
        print(f"\n{metric}:\n| variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |")
        print("| --- |" + " --- |" * (len(seeds) + 1))
        for variant in variants:
            runs = [r for r in results if r["variant"] == variant and r["seed"] in seeds]
            values = [summary(r)[metric] for r in runs]
            cells = " | ".join(f"{v:.1f}" if metric != "solved_at" else f"{v:.0f}" for v in values)
            print(f"| {variant} | {cells} | {np.mean(values):.1f} |")


# CleanRL dqn.py defaults (total_timesteps is --steps)
CLEANRL = {
    "learning_rate": 2.5e-4,
    "buffer_size": 10_000,
    "gamma": 0.99,
    "tau": 1.0,
    "target_network_frequency": 500,
    "batch_size": 128,
    "start_e": 1.0,
    "end_e": 0.05,
    "exploration_fraction": 0.5,
    "learning_starts": 10_000,
    "train_frequency": 10,
}


class CleanRLDQN:
    """CleanRL's DQN on CartPole-v1 with SB3's buffer (``"sb3"``) or recollect's, run in chunks.

    Each agent owns its env, networks, optimizer, epsilon RNG and buffer, so two
    agents can advance in turns (:meth:`advance`) in one process and share the
    machine's load; :attr:`cpu_s` sums the process CPU time of its own chunks.
    """

    def __init__(self, buffer: str, seed: int, steps: int) -> None:
        from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer
        from torch import nn, optim

        import recollect.sb3

        h = CLEANRL
        self.buffer, self.seed, self.steps = buffer, seed, steps
        self.random = random.Random(seed)
        self.envs = gym.wrappers.vector.RecordEpisodeStatistics(
            gym.vector.SyncVectorEnv(
                [lambda: gym.make("CartPole-v1")],
                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            )
        )
        space, act = self.envs.single_observation_space, self.envs.single_action_space
        n_obs, n_act = int(np.prod(space.shape)), int(act.n)

        def net() -> nn.Module:
            layers = [nn.Linear(n_obs, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU()]
            return nn.Sequential(*layers, nn.Linear(84, n_act))

        th.manual_seed(seed)  # both agents of a seed start from the same weights
        self.q_network, self.target_network = net(), net()
        self.optimizer = optim.Adam(self.q_network.parameters(), lr=h["learning_rate"])
        self.target_network.load_state_dict(self.q_network.state_dict())
        cls = Sb3ReplayBuffer if buffer == "sb3" else recollect.sb3.ReplayBuffer
        self.rb = cls(h["buffer_size"], space, act, "cpu", handle_timeout_termination=False)
        self.returns: list[float] = []
        self.obs, _ = self.envs.reset(seed=seed)
        act.seed(seed)
        self.global_step, self.cpu_s = 0, 0.0

    def advance(self, k: int) -> None:
        """Runs the next ``k`` steps of CleanRL's loop (fewer at the end)."""
        from torch.nn import functional as F

        h, envs, rb = CLEANRL, self.envs, self.rb
        cpu0 = time.process_time()
        for global_step in range(self.global_step, min(self.global_step + k, self.steps)):
            frac = min(global_step / (h["exploration_fraction"] * self.steps), 1.0)
            epsilon = h["start_e"] + frac * (h["end_e"] - h["start_e"])
            if self.random.random() < epsilon:
                actions = np.array([envs.single_action_space.sample()])
            else:
                with th.no_grad():
                    actions = self.q_network(th.Tensor(self.obs)).argmax(dim=1).numpy()
            next_obs, rewards, terminations, _truncations, infos = envs.step(actions)
            if "_episode" in infos:
                self.returns += infos["episode"]["r"][infos["_episode"]].tolist()
            real_next_obs = next_obs.copy()
            if "_final_obs" in infos:
                for idx in np.flatnonzero(infos["_final_obs"]):
                    real_next_obs[idx] = infos["final_obs"][idx]
            rb.add(self.obs, real_next_obs, actions, rewards, terminations, infos)
            self.obs = next_obs
            if global_step > h["learning_starts"]:
                if global_step % h["train_frequency"] == 0:
                    data = rb.sample(h["batch_size"])
                    with th.no_grad():
                        target_max, _ = self.target_network(data.next_observations).max(dim=1)
                        td_target = data.rewards.flatten() + h["gamma"] * target_max * (
                            1 - data.dones.flatten()
                        )
                    old_val = self.q_network(data.observations).gather(1, data.actions).squeeze()
                    loss = F.mse_loss(td_target, old_val)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                if global_step % h["target_network_frequency"] == 0:
                    self.target_network.load_state_dict(self.q_network.state_dict())
            self.global_step = global_step + 1
        self.cpu_s += time.process_time() - cpu0

    def result(self) -> dict:
        """Last-20 training return, a greedy evaluation (10 episodes), episodes, CPU s."""
        env, evals = gym.make("CartPole-v1"), []
        for i in range(10):
            o, _ = env.reset(seed=10_000 + 100 * self.seed + i)
            done, total = False, 0.0
            while not done:
                with th.no_grad():
                    a = int(self.q_network(th.Tensor(o)[None]).argmax(dim=1)[0])
                o, r, term, trunc, _ = env.step(a)
                total += float(r)
                done = term or trunc
            evals.append(total)
        return {
            "buffer": self.buffer,
            "seed": self.seed,
            "last20": float(np.mean(self.returns[-20:])),
            "episodes": len(self.returns),
            "greedy_eval": float(np.mean(evals)),
            "cpu_s": self.cpu_s,
        }


def run_cleanrl(seeds: list[int], steps: int, out: Path, chunk: int = 500) -> None:
    """Per seed, both buffers' agents advance in turns of ``chunk`` steps (same load)."""
    th.set_num_threads(1)
    results = []
    for k, seed in enumerate(seeds):
        order = ("sb3", "recollect") if k % 2 == 0 else ("recollect", "sb3")
        agents = [CleanRLDQN(buffer, seed, steps) for buffer in order]
        while agents[0].global_step < steps:
            for agent in agents:
                agent.advance(chunk)
        for agent in agents:
            results.append(agent.result())
            print(json.dumps(results[-1]), flush=True)
        (out / "cleanrl_results.json").write_text(json.dumps(results, indent=1))
    print(f"\nCleanRL DQN, CartPole-v1, {steps:,} steps")
    print("| buffer | seed | last-20 return | greedy eval (10) | episodes | CPU s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in sorted(results, key=lambda r: (r["buffer"], r["seed"])):
        print(
            f"| {r['buffer']} | {r['seed']} | {r['last20']:.1f} | {r['greedy_eval']:.1f} | "
            f"{r['episodes']} | {r['cpu_s']:.1f} |"
        )
    cpu = {b: sum(r["cpu_s"] for r in results if r["buffer"] == b) for b in ("sb3", "recollect")}
    print(
        f"\ntotal CPU s: sb3 {cpu['sb3']:.1f}, recollect {cpu['recollect']:.1f}; ratio "
        f"recollect/sb3 = {cpu['recollect'] / cpu['sb3']:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=ZOO_STEPS)
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_cartpole"))
    parser.add_argument("--report-only", action="store_true", help="re-plot OUT/results.json")
    parser.add_argument("--cleanrl", action="store_true", help="CleanRL's dqn.py loop instead")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cleanrl:
        run_cleanrl(args.seeds, args.steps, args.out)
        return
    results = []
    if args.report_only:
        results = json.loads((args.out / "results.json").read_text())
    for seed in [] if args.report_only else args.seeds:
        for variant in args.variants:
            r = run(variant, seed, args.steps, args.eval_every, args.eval_episodes)
            results.append(r)
            final, secs = r["final"], r["seconds"]
            print(f"{variant:14s} seed {seed}: final eval {final:6.1f}  ({secs:.0f} s)", flush=True)
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "learning_curves.png")
    report(results, args.seeds, args.variants)
    print(f"\nwrote {args.out / 'learning_curves.png'} and {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
