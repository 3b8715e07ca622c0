"""The default trading agent's rollout with the C actor step (Gaussian head,
``riskppo.nn.actor_step``) against the PyTorch actor step, side by side in one process (1 torch
thread), alternating so that a slow moment of a shared host hits both.

The model is the one ``riskppo train`` builds from ``riskppo/configs/trading_googl.yaml``
(8 envs, LSTM 64, a ``Box`` action with a diagonal Gaussian head). Two figures per path:

- the actor step alone for the 8 envs (µs per call, median);
- whole rollouts (``n_steps`` × 8 env steps: actor step, clipping, the trading envs' step, the
  buffers), steps/s over ``--rounds`` alternating rollouts each, the speed-up per round (median)
  and of the totals;
- training: two models built alike, one per path, each ``learn``-ing one rollout's steps
  (rollout, estimate, update) in turn for ``--rounds`` iterations: steps/s and speed-ups as above.

Every rollout starts from the same env reset, with the observation normaliser's statistics
frozen after a warm-up rollout, and draws the same normals (generators seeded alike): the two
paths' actions agree to float rounding (printed: the largest difference over a rollout).

    python benchmarks/trading_rollout.py
    python benchmarks/trading_rollout.py --rounds 20 --repeats 500
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from _common import BenchParser, machine, positive_int, run_main, table

from riskppo import DistributionalPPO
from riskppo.algo.collect import collect_rollout
from riskppo.algo.loop import reset_carry
from riskppo.cli.main import load_config
from riskppo.envs.vec.build import find_normalizer
from riskppo.nn.policy import RecurrentActorCritic, RolloutActor

PATHS = ("C step", "PyTorch step")


def actor_of(policy: RecurrentActorCritic, path: str) -> RolloutActor:
    actor = RolloutActor(policy)
    assert actor.c_step is not None, "the C actor step does not apply to this model"
    if path == "PyTorch step":
        actor.c_step = None
    return actor


def step_us(model: DistributionalPPO, repeats: int) -> dict[str, float]:
    """Median µs of one actor step for the model's envs, the two paths interleaved."""
    n = model.n_envs
    obs = torch.randn(n, model.policy.actor_lstm.input_size)
    state, starts = model.policy.initial_state(n).pi, np.zeros(n, bool)
    with torch.inference_mode():
        actors = {path: actor_of(model.policy, path) for path in PATHS}
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for i in range(repeats + 10):  # 10 warm-up calls each
            for path, actor in actors.items():
                t = time.perf_counter()
                actor.act(obs, state, starts, generator=g)
                if i >= 10:
                    times[path].append(time.perf_counter() - t)
    return {path: 1e6 * statistics.median(ts) for path, ts in times.items()}


def rollout_runner(model: DistributionalPPO, path: str) -> Callable[[], tuple[float, torch.Tensor]]:
    """One rollout on ``path`` from the model's own env, reset alike (same seed) every time:
    returns (seconds, actions)."""
    cfg, policy = model.config, model.policy
    learner = model.learner()
    real = policy.rollout_actor

    def run() -> tuple[float, torch.Tensor]:
        state = reset_carry(learner, model.state)
        assert state.carry is not None
        generator = torch.Generator().manual_seed(1)
        policy.rollout_actor = lambda: actor_of(policy, path)  # type: ignore[method-assign]
        try:
            t = time.perf_counter()
            rollout, _, _ = collect_rollout(
                policy, learner.env, state.carry, cfg.ppo.n_steps, cfg.ppo.chunk_len, generator
            )
            return time.perf_counter() - t, rollout.actions
        finally:
            policy.rollout_actor = real  # type: ignore[method-assign]

    return run


def rollout_seconds(model: DistributionalPPO, rounds: int) -> tuple[dict[str, list[float]], float]:
    """Seconds per rollout on each path (``rounds`` each, alternating, after a warm-up one that
    fills the observation normaliser's statistics, then frozen) and the largest difference
    between the two paths' actions over a rollout."""
    runs = {path: rollout_runner(model, path) for path in PATHS}
    runs["PyTorch step"]()
    normalizer = find_normalizer(model.env) if model.env is not None else None
    if normalizer is not None:  # frozen: every rollout sees the same observations
        normalizer.training = False
    c_actions, torch_actions = (run()[1] for run in runs.values())
    seconds: dict[str, list[float]] = {path: [] for path in PATHS}
    for _ in range(rounds):
        for path, run in runs.items():
            seconds[path].append(run()[0])
    return seconds, (c_actions - torch_actions).abs().max().item()


def train_seconds(rounds: int) -> dict[str, list[float]]:
    """Seconds per training iteration (rollout, estimate, update: ``learn`` of one rollout's
    steps) of two models built alike, one per path, trained in turn for ``rounds`` iterations
    after a warm-up one."""
    models = {path: DistributionalPPO(config=load_config(None, [])) for path in PATHS}
    policy = models["PyTorch step"].policy
    policy.rollout_actor = lambda: actor_of(policy, "PyTorch step")  # type: ignore[method-assign]
    seconds: dict[str, list[float]] = {path: [] for path in PATHS}
    for i in range(rounds + 1):
        for path, model in models.items():
            t = time.perf_counter()
            model.learn(model.config.ppo.n_steps * model.n_envs, reset_num_timesteps=False)
            if i > 0:
                seconds[path].append(time.perf_counter() - t)
    for model in models.values():
        model.close()
    return seconds


def speed_rows(name: str, seconds: dict[str, list[float]], steps: int) -> list[list[str]]:
    """Steps/s per path and the C path's speed-up: the median per round and of the totals."""
    per_round = [t / c for c, t in zip(seconds["C step"], seconds["PyTorch step"])]
    total = sum(seconds["PyTorch step"]) / sum(seconds["C step"])
    return [
        [
            name,
            path,
            f"{steps * len(seconds[path]) / sum(seconds[path]):,.0f}",
            f"{statistics.median(per_round):.2f}× (total {total:.2f}×)"
            if path == "C step"
            else "1.00×",
        ]
        for path in PATHS
    ]


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=positive_int, default=10, help="rollouts per path, alternating")
    p.add_argument("--repeats", type=positive_int, default=300, help="actor-step calls per path")
    a = p.parse_args()
    torch.set_num_threads(1)
    print("machine:", machine())
    model = DistributionalPPO(config=load_config(None, []))
    us = step_us(model, a.repeats)
    seconds, diff = rollout_seconds(model, a.rounds)
    steps = model.config.ppo.n_steps * model.n_envs
    rows = [
        ["actor step, 8 envs", path, f"{us[path]:,.1f} µs", f"{us['PyTorch step'] / us[path]:.2f}×"]
        for path in PATHS
    ]
    rows += speed_rows("rollout", seconds, steps)
    rows += speed_rows("training (rollout + update)", train_seconds(a.rounds), steps)
    print(table(rows, ["what", "actor", "steps/s (step: µs per call)", "C speed-up"]))
    print(f"largest action difference over a rollout of {steps:,} steps: {diff:.2e}")
    model.close()


if __name__ == "__main__":
    sys.exit(run_main(main))
