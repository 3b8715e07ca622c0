"""Behaviour cloning (R-ALG-12): demonstration files, the BC term, the schedule, the
strategy teacher's labels and the recurrent chunk replay."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import save_file

from riskppo import DistributionalPPO
from riskppo.algo import bc
from riskppo.algo.bc import bc_coef_at, bc_term
from riskppo.config import BCConfig, Config, ConfigError
from riskppo.demos.files import (
    DemonstrationError,
    Demonstrations,
    load_demonstrations,
    save_demonstrations,
)
from riskppo.envs.market.synthetic import regime_switching
from riskppo.envs.teacher import strategy_teacher
from riskppo.envs.trading.env import TradingEnv
from riskppo.envs.trading.strategies import (
    sma_crossover_targets,
    strategy_exposures,
    strategy_signals,
)

OBS = spaces.Box(-10, 10, (3,), np.float32)
ACT = spaces.Discrete(2)


class Cue(gym.Env):
    """Random observations; the teacher's action is ``obs[0] > 0``."""

    observation_space = OBS
    action_space = ACT

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.normal(size=3).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.normal(size=3).astype(np.float32)
        return obs, 0.0, False, self.t >= 16, {}


def demos(T=32, N=2, seed=0) -> Demonstrations:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, N, 3, generator=g)
    starts = torch.zeros(T, N, dtype=torch.bool)
    starts[0] = True
    starts[T // 2, 0] = True
    return Demonstrations(obs, (obs[..., 0] > 0).long(), starts, torch.randn(T, N, generator=g))


# ---- demonstration files ----------------------------------------------------------------------


def test_demonstration_file_round_trip(tmp_path):
    d = demos()
    path = save_demonstrations(tmp_path / "d.safetensors", d, {"source": "test"})
    back = load_demonstrations(path, OBS, ACT)
    for a, b in zip(
        (d.observations, d.actions, d.episode_starts, d.returns),
        (back.observations, back.actions, back.episode_starts, back.returns),
    ):
        torch.testing.assert_close(a, b)
    single = Demonstrations(d.observations[:, 0], d.actions[:, 0], d.episode_starts[:, 0])
    one = load_demonstrations(save_demonstrations(tmp_path / "one.safetensors", single), OBS, ACT)
    assert one.shape == (32, 1) and one.returns is None


def _write(tmp_path, **fields):
    d = demos()
    base = {
        "observations": d.observations,
        "actions": d.actions,
        "episode_starts": d.episode_starts,
    }
    base.update(fields)
    path = tmp_path / "bad.safetensors"
    save_file({k: v for k, v in base.items() if v is not None}, str(path))
    return path


@pytest.mark.parametrize(
    "fields, field, fragment",
    [
        ({"actions": None}, "actions", "is missing"),
        ({"observations": torch.randn(32, 2, 4)}, "observations", "the env's is [3]"),
        ({"observations": torch.full((32, 2, 3), math.nan)}, "observations", "non-finite"),
        ({"actions": torch.full((32, 2), 2, dtype=torch.long)}, "actions", "outside [0, 2)"),
        ({"actions": torch.zeros(32, 2)}, "actions", "must be integer"),
        ({"episode_starts": torch.zeros(31, 2, dtype=torch.bool)}, "episode_starts", "shape"),
        ({"episode_starts": torch.full((32, 2), 3.0)}, "episode_starts", "0/1"),
        ({"returns": torch.full((32, 2), math.inf)}, "returns", "non-finite"),
        ({"extra": torch.zeros(1)}, "extra", "unknown field"),
    ],
)
def test_malformed_demonstration_file_gives_a_one_line_error(tmp_path, fields, field, fragment):
    """Mutation check: dropping the observation-shape check (or the finite check) in
    ``validate_demonstrations`` makes the matching case load without an error."""
    path = _write(tmp_path, **fields)
    with pytest.raises(DemonstrationError) as info:
        load_demonstrations(path, OBS, ACT)
    msg = str(info.value)
    assert str(path) in msg and f"'{field}'" in msg and fragment in msg
    assert "\n" not in msg
    assert isinstance(info.value, ValueError)


def test_not_a_demonstration_file(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(DemonstrationError, match=r"junk\.safetensors: not a safetensors"):
        load_demonstrations(path)
    with pytest.raises(DemonstrationError, match="no such demonstration file"):
        load_demonstrations(tmp_path / "missing.safetensors")


def test_box_actions_must_be_inside_the_bounds(tmp_path):
    d = demos()
    box = spaces.Box(-1.0, 1.0, (1,), np.float32)
    ok = Demonstrations(d.observations, torch.zeros(32, 2, 1), d.episode_starts)
    load_demonstrations(save_demonstrations(tmp_path / "ok.safetensors", ok), OBS, box)
    bad = Demonstrations(d.observations, torch.full((32, 2, 1), 2.0), d.episode_starts)
    with pytest.raises(DemonstrationError, match="'actions' has a value outside"):
        load_demonstrations(save_demonstrations(tmp_path / "b.safetensors", bad), OBS, box)


# ---- config and schedule ----------------------------------------------------------------------


def test_bc_config_validation():
    assert BCConfig().source == "rollout"
    with pytest.raises(ConfigError, match=r"bc\.path"):
        Config.build({"bc": {"source": "file"}})
    with pytest.raises(ConfigError, match=r"bc\.path"):
        Config.build({"bc": {"path": "x.safetensors"}})
    with pytest.raises(ConfigError, match=r"bc\.teacher applies"):
        Config.build({"bc": {"teacher": "buy_and_hold"}})
    with pytest.raises(ConfigError, match=r"bc\.teacher"):
        Config.build({"bc": {"source": "teacher", "teacher": "momentum"}})
    with pytest.raises(ConfigError, match=r"bc\.decay_steps"):
        Config.build({"bc": {"decay_steps": 0}})


def test_bc_coef_decays_linearly_to_zero():
    cfg = BCConfig(bc_coef=2.0, decay_steps=100)
    assert [bc_coef_at(cfg, s) for s in (0, 50, 100, 1000)] == [2.0, 1.0, 0.0, 0.0]
    assert bc_coef_at(BCConfig(bc_coef=2.0), 10**9) == 2.0


# ---- the BC term ------------------------------------------------------------------------------


def make(tmp_path=None, **bc_cfg):
    cfg = {
        "seed": 0,
        "env": {"n_envs": 2},
        "ppo": {"n_steps": 16, "batch_size": 16, "bptt_len": 8},
        "policy": {"lstm_hidden_size": 8, "net_arch": [8]},
        "bc": bc_cfg,
    }
    return DistributionalPPO(Cue, config=cfg)


@dataclass
class Ctx:
    """The parts of ``UpdateContext`` that ``bc_term`` reads."""

    cfg: Config
    policy: Any
    generator: torch.Generator
    bc: Any


def ctx_for(model, steps=0):
    """The update context of the next update at ``steps`` env steps (BC inputs built as the
    training loop builds them)."""
    inputs = bc.bc_inputs(model.config, model.policy, model.bc, steps)
    return Ctx(model.config, model.policy, torch.Generator().manual_seed(0), inputs)


def fake_batch(T=8, B=4):
    g = torch.Generator().manual_seed(1)
    return SimpleNamespace(raw_advantages=torch.randn(T, B, generator=g) * 20, n_chunks=B)


def _grads(model, loss):
    model.policy.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad for n, p in model.policy.named_parameters()}


def _check_actor_only(grads):
    actor = [n for n in grads if n.startswith(("actor_", "action_head"))]
    critic = [n for n in grads if n.startswith("critic_")]
    assert actor and critic
    assert any(grads[n] is not None and float(grads[n].abs().sum()) > 0 for n in actor)
    for n in critic:
        assert grads[n] is None or float(grads[n].abs().sum()) == 0.0, n


def test_demo_bc_gradient_reaches_only_the_actor(tmp_path):
    """Mutation check: replaying the demonstrations with ``policy.evaluate_sequences`` (actor and
    critics) and adding the critic outputs to the loss fails the critic assertion."""
    path = save_demonstrations(tmp_path / "d.safetensors", demos())
    model = make(source="file", path=str(path), bc_coef=1.0)
    ctx = ctx_for(model)
    log_prob = torch.zeros(32, requires_grad=True)
    term, stats = bc_term(ctx, fake_batch(), log_prob, torch.tensor(1.0))
    assert float(term.detach()) > 0 and float(stats["bc_coef"]) == 1.0
    assert 0.0 < float(stats["bc_loss_ratio"]) < 1.0
    _check_actor_only(_grads(model, term))


def test_rollout_bc_gradient_reaches_only_the_actor():
    model = make(bc_coef=0.5)
    obs = torch.randn(8, 4, 3)
    starts = torch.zeros(8, 4)
    dist, _ = model.policy.evaluate_sequences(obs, starts, model.policy.initial_state(4))
    log_prob = dist.log_prob(torch.zeros(32, dtype=torch.long))
    term, _ = bc_term(ctx_for(model), fake_batch(), log_prob, torch.tensor(1.0))
    _check_actor_only(_grads(model, term))


def test_bc_term_is_zero_when_the_coefficient_is_zero():
    """``bc_coef`` decayed to 0: the term is exactly 0 and gives no gradient. Mutation check:
    ``bc_coef_at`` returning ``cfg.bc_coef`` unconditionally fails this test."""
    model = make(bc_coef=1.0, decay_steps=10)
    log_prob = torch.randn(32, requires_grad=True)
    term, stats = bc_term(ctx_for(model, steps=10), fake_batch(), log_prob, torch.tensor(1.0))
    assert float(term) == 0.0 and float(stats["bc_loss_ratio"]) == 0.0
    assert not term.requires_grad
    term, stats = bc_term(ctx_for(model, steps=5), fake_batch(), log_prob, torch.tensor(1.0))
    assert float(stats["bc_coef"]) == 0.5 and term.requires_grad


def test_no_bc_stats_without_bc_coef():
    """``bc_coef: 0`` (the default): the update never computes a BC term (no ``bc_*`` stats)."""
    model = make()
    model.learn(64)
    assert not any("bc" in k for k in model.monitor.latest)
    heavy = make(bc_coef=0.1)
    heavy.learn(64)
    assert "train/bc_loss" in heavy.monitor.latest


def test_return_weights_clamp_the_exponent_before_exp():
    """Demonstration return weights are exp(min(z/β, log max_weight)): at the cap the weight is
    exp of the float32-rounded log(100) = 100.0000076…, where exp-then-clamp gives exactly 100.
    Mutation check: ``torch.exp(adv / beta).clamp(max=max_weight)`` in ``core.awr_weights``
    fails the first assertion."""
    returns = torch.tensor([[0.0], [0.0], [0.0], [1e6]])
    w = bc._weights(returns, BCConfig(beta=0.01, max_weight=100.0))
    cap = torch.exp(torch.tensor(math.log(100.0)))
    assert float(cap) != 100.0  # the two orders differ here
    assert float(w[3, 0]) == float(cap)
    assert bool(torch.isfinite(w).all()) and float(w[0, 0]) < 1.0


def test_file_source_needs_attach_and_returns(tmp_path):
    with pytest.raises(DemonstrationError, match=r"x\.safetensors"):  # checked when built
        make(source="file", path=str(tmp_path / "x.safetensors"), bc_coef=1.0)
    path = save_demonstrations(tmp_path / "d.safetensors", demos())
    model = make(source="file", path=str(path), bc_coef=1.0)
    model.bc = None  # a loop given no source for a file config: a clear error, not AWR
    with pytest.raises(ConfigError, match="attach_bc"):
        bc.bc_inputs(model.config, model.policy, model.bc, 0)
    with pytest.raises(ConfigError, match=r"needs bc\.source: teacher"):
        make(bc_coef=1.0).attach_bc(teacher=lambda o: 0)


# ---- recurrent chunk replay -------------------------------------------------------------------


def test_chunk_replay_equals_the_whole_sequence(tmp_path):
    """The demonstration chunks, replayed from the states captured once per update, give the same
    log-probabilities as one pass over the whole sequences. Mutation check: zero chunk states
    (``policy.actor_lstm.initial_state`` instead of the captured ones) fails it."""
    d = demos(T=32, N=2)
    path = save_demonstrations(tmp_path / "d.safetensors", d)
    model = make(source="file", path=str(path), bc_coef=1.0)
    assert model.bc is not None
    ch = bc.prepare_demos(model.policy, model.config, model.bc)
    assert ch is not None and ch.obs.shape == (8, 8, 3)
    with torch.no_grad():
        dist, _, _ = model.policy.actor_sequence(
            d.observations, d.episode_starts, model.policy.actor_lstm.initial_state(2)
        )
        whole = dist.log_prob(d.actions.reshape(-1)).reshape(32, 2)
        dist, _, _ = model.policy.actor_sequence(ch.obs, ch.starts, ch.state)
        chunked = dist.log_prob(ch.actions.reshape(-1)).reshape(8, 4, 2)  # [L, chunk, env]
    torch.testing.assert_close(chunked.transpose(0, 1).reshape(32, 2), whole)


# ---- strategy teacher -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def market():
    return regime_switching(600, seed=3)


def test_strategy_signals_hold_the_baselines_exposure(market):
    plain = TradingEnv(market, continuous=True, random_start=False)
    sized = TradingEnv(market, continuous=True, random_start=False, sizing="vol_target")
    np.testing.assert_array_equal(
        strategy_signals(plain, strategy_exposures(plain, "sma_crossover")),
        sma_crossover_targets(market["close"]),
    )
    # vol-targeted buy-and-hold on a vol-targeted env: the full signal 1 wherever sized
    sig = strategy_signals(sized, strategy_exposures(sized, "vol_target_buy_and_hold"))
    first = sized.first_valid_index
    np.testing.assert_array_equal(sig[first:], 1.0)
    discrete = TradingEnv(market, random_start=False)  # positions (-1, 0, 1)
    teacher = strategy_teacher(discrete, "sma_crossover")
    bars = np.arange(first, first + 200)
    want = sma_crossover_targets(market["close"])[bars].astype(int) + 1  # index of 0 or 1
    np.testing.assert_array_equal(teacher(np.zeros((200, 1)), bars), want)
    with pytest.raises(RuntimeError, match="info\\['bar'\\]"):
        teacher(np.zeros((1, 1)), np.array([-1]))


def test_chunk_states_in_blocks_equal_one_replay(monkeypatch):
    """Demonstrations are replayed through the actor LSTM block by block; the chunk states are
    those of one replay of the whole sequence (episode starts included)."""
    from riskppo.config import PolicyConfig
    from riskppo.nn.policy import RecurrentActorCritic

    d = demos(T=96, N=3, seed=1)
    policy = RecurrentActorCritic(
        spaces.Box(-10, 10, (d.observations.shape[2],)),
        spaces.Discrete(2),
        PolicyConfig(lstm_hidden_size=8, n_lstm_layers=2),
        n_critics=2,
        critic_out=4,
    )
    lstm, L = policy.actor_lstm, 8
    with torch.no_grad():
        _, _, captured = lstm(
            d.observations, lstm.initial_state(3), d.episode_starts, capture=range(0, 96, L)
        )
    whole = [captured[t] for t in range(0, 96, L)]
    monkeypatch.setattr(bc, "REPLAY_ROWS", 50)  # blocks of 16 steps x 3 sequences
    states = bc.chunk_states(policy, d.observations, d.episode_starts, L)
    assert states.h.shape == (2, 12 * 3, 8)
    torch.testing.assert_close(states.h, torch.cat([s.h for s in whole], 1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(states.c, torch.cat([s.c for s in whole], 1), rtol=1e-6, atol=1e-6)
