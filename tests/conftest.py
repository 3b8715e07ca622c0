"""Set-ups shared by the test files: a small CartPole model, one rollout and its estimates, a tiny
policy network and a random chunk batch for it."""

from __future__ import annotations

import logging
import math
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from gymnasium import spaces

from riskppo import DistributionalPPO
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.collect import collect_rollout
from riskppo.algo.constraints import constraint_for
from riskppo.algo.estimate import Estimates, estimate
from riskppo.algo.loop import apply_rescales, reset_carry
from riskppo.config import PolicyConfig
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.recurrent import LSTMState

# 4 envs x 32 steps, 16-step chunks, 2 epochs, LSTM 16: a few seconds per update on one core
SMALL_CARTPOLE = dict(
    n_envs=4, n_steps=32, batch_size=64, bptt_len=16, n_epochs=2, lstm_hidden_size=16
)


def pytest_configure(config: pytest.Config) -> None:
    """No test writes the trial ledger under ./runs (nor counts another test's trials): the
    commands run with ``RISKPPO_LEDGER=off`` unless a test names a ledger (``--ledger``, or
    its own ``RISKPPO_LEDGER`` through ``monkeypatch``). Set for the whole session, before any
    fixture: a module-scoped fixture that trains a run is set up before a function-scoped one
    could set it (such runs once landed in the developer's own ledger)."""
    os.environ["RISKPPO_LEDGER"] = "off"


@pytest.fixture
def small_cartpole() -> Callable[..., DistributionalPPO]:
    """``make(env="CartPole-v1", seed=0, **keywords)``: a model of :data:`SMALL_CARTPOLE` size."""

    def make(env: str = "CartPole-v1", seed: int = 0, **kw: Any) -> DistributionalPPO:
        return DistributionalPPO(env, seed=seed, **{**SMALL_CARTPOLE, **kw})

    return make


def _rollout_and_estimates(model: DistributionalPPO) -> tuple[Any, Estimates]:
    """One rollout from freshly reset envs and its estimates, the loop's PopArt step applied
    (no optimizer step)."""
    model.state = reset_carry(model.learner(), model.state)
    cfg = model.config
    rollout, _, _ = collect_rollout(
        model.policy,
        model.env,
        model.state.carry,
        cfg.ppo.n_steps,
        cfg.ppo.chunk_len,
        model.state.rng.sample,
    )
    constraint = constraint_for(cfg) if model.state.risk is not None else None
    est = estimate(
        cfg, model.policy, model.critic, model.state.scaling, rollout, constraint, model.state.risk
    )
    apply_rescales(model.policy, est.rescales)
    return rollout, est


@pytest.fixture
def rollout_and_estimates() -> Callable[[DistributionalPPO], tuple[Any, Estimates]]:
    """``rollout_and_estimates(model)`` → ``(rollout, estimates)``."""
    return _rollout_and_estimates


def _tiny_policy(
    action_space: spaces.Space | None = None,
    *,
    obs_dim: int = 3,
    critic_out: int = 4,
    risk_head: bool = False,
    seed: int | None = 0,
    **policy: Any,
) -> RecurrentActorCritic:
    """A policy on ``Box(obs_dim)`` observations (``Discrete(2)`` actions unless given) with twin
    critics of ``critic_out`` outputs, initialised from ``seed`` (``None``: from the global
    generator); ``policy``: :class:`PolicyConfig` fields."""
    obs_space = spaces.Box(-math.inf, math.inf, (obs_dim,), dtype="float32")

    def build() -> RecurrentActorCritic:
        return RecurrentActorCritic(
            obs_space,
            action_space if action_space is not None else spaces.Discrete(2),
            PolicyConfig(**policy),
            n_critics=2,
            critic_out=critic_out,
            risk_head=risk_head,
        )

    if seed is None:  # the global generator's weights
        return build()
    with torch.random.fork_rng(devices=[]):  # weights of ``seed``; the global stream untouched
        torch.manual_seed(seed)
        return build()


@pytest.fixture
def tiny_policy() -> Callable[..., RecurrentActorCritic]:
    """``tiny_policy(action_space=None, *, obs_dim=3, critic_out=4, risk_head=False, seed=0,
    **policy_config)``."""
    return _tiny_policy


def _random_chunk_batch(
    policy: RecurrentActorCritic, n_chunks: int, L: int = 8, obs_dim: int = 3, k: int = 8
) -> ChunkBatch:
    """``n_chunks`` random float64 chunks of ``L`` steps for ``policy`` (``Discrete(2)`` actions,
    ``k`` critic outputs), with episode starts inside chunks and random entry states."""
    g = torch.Generator().manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    starts = torch.rand(L, n_chunks, generator=g) < 0.2
    state = policy.initial_state(n_chunks)
    state = RecurrentState(
        LSTMState(randn(*state.pi.h.shape), randn(*state.pi.c.shape)),
        tuple(LSTMState(randn(*s.h.shape), randn(*s.c.shape)) for s in state.vf),
    )
    return ChunkBatch(
        obs=randn(L, n_chunks, obs_dim),
        actions=torch.randint(0, 2, (L, n_chunks), generator=g),
        old_log_probs=math.log(0.5) + 0.1 * randn(L, n_chunks),
        advantages=randn(L, n_chunks),
        targets=randn(L, n_chunks),
        old_critic=randn(policy.n_critics, L, n_chunks, k),
        episode_starts=starts,
        state=state,
        raw_advantages=3.0 * randn(L, n_chunks),
    )


@pytest.fixture
def random_chunk_batch() -> Callable[..., ChunkBatch]:
    """``random_chunk_batch(policy, n_chunks, L=8, obs_dim=3, k=8)``."""
    return _random_chunk_batch


@pytest.fixture(scope="session")
def local_ray() -> Iterator[str]:
    """A local Ray instance of two CPUs in this test process (``ray.init(num_cpus=2)``), for the
    tests of the Ray backend; its address, for a command to join with ``--ray-address``. Its
    workers import ``tests.*`` (job functions travel by reference). Shut down at the end of the
    session; this process's SIGTERM handler (which ``ray.init`` replaces) comes back."""
    ray = pytest.importorskip("ray")
    root = str(Path(__file__).parents[1])
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([root, path] if path else [root])
    previous = signal.getsignal(signal.SIGTERM)
    context = ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        yield str(context.address_info["gcs_address"])
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, previous)
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path
