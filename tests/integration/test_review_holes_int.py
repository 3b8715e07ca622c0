"""Test holes a code review found that need an environment (each fails when its bug returns).

Hole 4: a new learning rate reaches every param group; hole 6: the post-step bootstrap state
under ``lstm_sharing="all"``; hole 7: the finite-costs guard of ``rollout/reward_costs_fraction``.
They go through the public API (``DistributionalPPO``, ``set_hyperparams``, ``learn``,
``metrics.jsonl``) and module-level functions (``collect_rollout``, ``estimate``), not the trainer's
private attributes. The mutation each test catches is named in its docstring.
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo import DistributionalPPO
from riskppo.train.collect import CollectorState, collect_rollout, obs_tensor
from riskppo.train.estimate import estimate
from riskppo.train.scaling import initial_scaling

TINY = dict(n_envs=2, n_steps=16, batch_size=32, n_epochs=1, lstm_hidden_size=8)


# ---- hole 4: a new learning rate reaches every param group (R-PBT-1, lr schedule) -------------


def _with_second_group(model: DistributionalPPO, lr: float) -> None:
    """Give the optimizer a second param group (as a user's or a PBT optimizer may have)."""
    model.optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))], "lr": lr})
    assert len(model.optimizer.param_groups) == 2


def test_set_hyperparams_learning_rate_reaches_every_param_group():
    """``set_hyperparams({"ppo.learning_rate": …})`` sets the lr of *every* param group at once.
    Mutation: apply the lr to ``optimizer.param_groups[0]`` only (``param_groups[:1]`` in the
    trainer's lr-schedule loop), or not at all until the next update."""
    model = DistributionalPPO("CartPole-v1", seed=0, **TINY)
    _with_second_group(model, 0.123)
    model.set_hyperparams({"ppo.learning_rate": 1e-4})
    assert [g["lr"] for g in model.optimizer.param_groups] == [1e-4, 1e-4]
    model.close()


def test_linear_lr_schedule_reaches_every_param_group():
    """The linear schedule's lr goes into every param group at each update: 4 updates of 32 steps
    out of 128, the last one starts at 96 → lr = 1e-3 · (1 − 96/128) in both groups.
    Mutation: ``param_groups[:1]`` in the schedule loop (the second group keeps 0.5)."""
    model = DistributionalPPO(
        "CartPole-v1", seed=0, learning_rate=1e-3, lr_schedule="linear", **TINY
    )
    _with_second_group(model, 0.5)
    model.learn(4 * 32)
    assert model.num_timesteps == 128
    lrs = [g["lr"] for g in model.optimizer.param_groups]
    assert lrs == pytest.approx([2.5e-4, 2.5e-4], rel=1e-12)
    model.close()


# ---- hole 6: post-step bootstrap state under lstm_sharing="all" (R-ALG-6) ----------------------


def test_bootstrap_uses_post_step_actor_state_with_lstm_sharing_all():
    """With ``lstm_sharing="all"`` the critics read the actor's LSTM. A truncated step's final
    observation is valued with that env's actor state *after* the step (no reset), and the last
    observation of the rollout with the state after the last step (R-ALG-6). Reference:
    a step-by-step actor loop through ``MaskedLSTM.step`` and the critic heads, computed before
    ``estimate``; checked on ``est.values`` and on the advantages of the truncated steps and of
    the last step (their δ uses exactly that bootstrap value).
    Mutations: keep the pre-step state (``pi_state`` instead of ``step.pi_state``) for a truncated
    env in ``collect_rollout``; reset it (``torch.ones`` for ``no_reset``) in ``estimate``;
    ``last_pi_state=carry.state.pi`` in ``collect_rollout``."""
    model = DistributionalPPO(
        "CartPole-v1",
        seed=1,
        n_envs=2,
        n_steps=16,
        batch_size=32,
        lstm_hidden_size=16,
        lstm_sharing="all",
        kwargs={"max_episode_steps": 5},
    )
    cfg, policy, critic, venv = model.config, model.policy, model.critic, model.env
    assert venv is not None
    venv.seed(0)
    obs = obs_tensor(venv.reset(), torch.device("cpu"))
    N = obs.shape[0]
    carry = CollectorState(obs, torch.ones(N, dtype=torch.bool), policy.initial_state(N))
    rollout, _, _ = collect_rollout(
        policy, venv, carry, cfg.ppo.n_steps, cfg.ppo.chunk_len, torch.Generator().manual_seed(0)
    )
    T = rollout.rewards.shape[0]
    assert bool(rollout.truncated.any())
    scaling = initial_scaling(cfg)

    def value(latent):  # raw twin-min value of the critic heads reading the actor latent
        out = policy.critic_heads([latent])[: policy.n_critics]
        return scaling.to_raw(critic.mean(out).min(dim=0).values)

    def step(obs_i, state, reset: bool):
        return policy.actor_lstm.step(obs_i, state, torch.full((obs_i.shape[0],), float(reset)))

    expected_v, boot, wrong = torch.empty(T, N), {}, {}
    with torch.no_grad():
        state = rollout.start_state.pi
        for t in range(T):
            latent, post = policy.actor_lstm.step(rollout.obs[t], state, rollout.episode_starts[t])
            expected_v[t] = value(latent)
            for k, (tt, i) in enumerate(rollout.final_index.tolist()):
                if tt != t:
                    continue
                f, one = rollout.final_obs[k : k + 1], slice(i, i + 1)
                boot[t, i] = float(value(step(f, post.select(one), False)[0]))
                wrong[t, i] = [
                    float(value(step(f, state.select(one), False)[0])),  # pre-step state
                    float(value(step(f, post.select(one), True)[0])),  # reset state
                ]
            state = post
        last_latent, _ = policy.actor_lstm.step(rollout.last_obs, state, rollout.last_episode_start)
        last_v = value(last_latent)
        last_wrong = value(
            policy.actor_lstm.step(rollout.last_obs, carry.state.pi, carry.episode_start)[0]
        )

    est = estimate(cfg, policy, critic, scaling, rollout)
    torch.testing.assert_close(est.values, expected_v, rtol=0, atol=1e-5)
    gamma = cfg.ppo.gamma
    r, v, adv = rollout.rewards, expected_v, est.advantages
    for (t, i), b in boot.items():
        # a truncated step's advantage is its own δ: done cuts the GAE recursion
        assert float(adv[t, i]) == pytest.approx(
            float(r[t, i]) + gamma * b - float(v[t, i]), abs=2e-6
        )
        assert all(abs(b - w) > 5e-5 for w in wrong[t, i])  # the mutations would be seen
    open_envs = [
        i for i in range(N) if not bool(rollout.terminated[-1, i] | rollout.truncated[-1, i])
    ]
    assert open_envs
    for i in open_envs:
        delta = float(r[-1, i]) + gamma * float(last_v[i]) - float(v[-1, i])
        assert float(adv[-1, i]) == pytest.approx(delta, abs=2e-6)
        assert abs(float(last_v[i]) - float(last_wrong[i])) > 5e-5
    model.close()


# ---- hole 7: the finite-costs guard (R-MON) ---------------------------------


class CostEnv(gym.Env):
    """Never ends within a rollout; ``info["reward_costs_fraction"]`` cycles through ``values``
    (``None``: the key is left out at that step; a string is not a number)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    values: tuple[float | str | None, ...] = (
        0.1,
        math.nan,
        0.3,
        math.inf,
        0.5,
        -math.inf,
        "n/a",
        0.4,
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.n += 1
        c = self.values[self.n % len(self.values)]
        info = {} if c is None else {"reward_costs_fraction": c}
        return np.full(2, 0.1, np.float32), 1.0, False, self.n >= 1000, info


def _metrics_after_one_update(tmp_path, values):
    env = type("Env", (CostEnv,), {"values": values})
    model = DistributionalPPO(env, seed=0, run_dir=tmp_path, **TINY)
    model.learn(32)  # one update: 16 steps × 2 envs
    model.close()
    lines = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1
    return lines[0]


def test_reward_costs_fraction_ignores_non_finite_entries_and_counts_them(tmp_path):
    """``rollout/reward_costs_fraction`` is the mean of the finite entries only (0.325 here);
    the 16 others (NaN, +inf, −inf, a string: 4 per 8 steps × 2 cycles × 2 envs) are counted in
    ``warn/reward_costs_fraction_nonfinite``, and none of them stops training. Mutations: the
    mean over all entries (NaN); the counter not recorded (or always 0); ``float(value)`` in
    ``collect._finite_or_nan`` without its ``try`` (the string raises)."""
    m = _metrics_after_one_update(tmp_path, CostEnv.values)
    assert m["rollout/reward_costs_fraction"] == pytest.approx(0.325, abs=1e-6)
    assert m["warn/reward_costs_fraction_nonfinite"] == 16


def test_all_non_finite_costs_are_still_counted(tmp_path):
    """SPEC R-MON: non-finite costs → NaN + ``warn/`` counter, also when no entry is finite."""
    m = _metrics_after_one_update(tmp_path, (math.nan, math.inf))
    assert m.get("warn/reward_costs_fraction_nonfinite") == 32


def test_absent_costs_are_not_counted_as_non_finite(tmp_path):
    """An env that reports costs only at some steps (here every other step, all finite) gets the
    mean of what it reported and no non-finite warning."""
    m = _metrics_after_one_update(tmp_path, (0.2, None, 0.4, None))
    assert m["rollout/reward_costs_fraction"] == pytest.approx(0.3, abs=1e-6)
    assert "warn/reward_costs_fraction_nonfinite" not in m
