"""Integration tests of the recurrent distributional trainer on real Gymnasium envs (R-ALG-*)."""

from __future__ import annotations

import math
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from riskppo import ConfigError, DistributionalPPO
from riskppo.algo.collect import CollectorState, collect_rollout
from riskppo.algo.estimate import estimate
from riskppo.algo.returns import initial_scaling
from riskppo.algo.update import (
    NonFiniteTrainingError,
    UpdateContext,
    minibatch_loss,
    param_groups,
)
from riskppo.envs.vec.tensors import obs_tensor
from riskppo.nn.distributions import DiagGaussianDist
from riskppo.optim.step import group_grad_norms


@pytest.mark.parametrize("sharing", ["none", "critics", "all"])
@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_replay_reproduces_rollout_logprobs_and_values(
    sharing, critic, small_cartpole, rollout_and_estimates
):
    """R-ALG-1: replaying stored chunks gives the rollout's log-probs and values (≤1e-5)."""
    model = small_cartpole(critic=critic, lstm_sharing=sharing)
    _, est = rollout_and_estimates(model)
    data = est.data
    # episode boundaries inside chunks (not only at chunk starts) must be present
    assert bool(data.episode_starts[1:].any())
    with torch.no_grad():
        dist, _, _ = model.policy.actor_sequence(data.obs, data.episode_starts, data.state.pi)
        logp = dist.log_prob(data.actions.reshape(-1, *data.actions.shape[2:]))
        out, _, _ = model.policy.critic_sequence(data.obs, data.episode_starts, data.state)
    torch.testing.assert_close(logp, data.old_log_probs.reshape(-1), atol=1e-5, rtol=0)
    # critic predictions equal the rollout's old predictions (PopArt kept them unchanged in raw
    # units; old_critic holds them in the updated normalised units)
    torch.testing.assert_close(model.critic.old_prediction(out), data.old_critic, atol=1e-5, rtol=0)
    L = data.obs.shape[0]
    # first minibatch: ratio exactly 1 → no clipping, zero KL
    ctx = UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
    )
    mb = next(data.minibatches(model.config.ppo.batch_size // L, model.state.rng.shuffle))
    _, stats, n_bad = minibatch_loss(ctx, mb)
    assert n_bad == 0
    assert float(stats["clip_fraction"]) == 0.0
    assert abs(float(stats["approx_kl_k3"])) < 1e-6


def test_gradient_accumulation_equals_full_batch(small_cartpole, rollout_and_estimates):
    """R-ALG-13: accumulated micro-batch gradient == full minibatch gradient (≤1e-6 relative)."""
    model = small_cartpole(n_envs=4, n_steps=32, batch_size=128, bptt_len=8)
    _, est = rollout_and_estimates(model)
    model.policy.double()
    model.critic.taus = model.critic.taus.double()
    mb = est.data
    for name in ("obs", "advantages", "targets", "old_critic", "old_log_probs", "raw_advantages"):
        setattr(mb, name, getattr(mb, name).double())
    mb.state = type(mb.state)(
        type(mb.state.pi)(mb.state.pi.h.double(), mb.state.pi.c.double()),
        tuple(type(s)(s.h.double(), s.c.double()) for s in mb.state.vf),
    )
    grads = []
    for accum in (1, 4):
        ctx = UpdateContext(
            model.config.model_copy(
                update={"ppo": model.config.ppo.model_copy(update={"grad_accum_steps": accum})}
            ),
            model.policy,
            model.critic,
            model.optimizer,
            model.state.rng.shuffle,
            0.01,
        )
        model.policy.zero_grad()
        from riskppo.algo.update import split_micro

        for micro in split_micro(mb, accum):
            loss, _, _ = minibatch_loss(ctx, micro)
            (loss * micro.n_samples / mb.n_samples).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.policy.parameters()]))
    rel = (grads[0] - grads[1]).norm() / grads[0].norm()
    assert rel < 1e-6


def test_twin_critics_clip_against_their_own_old_predictions(small_cartpole, rollout_and_estimates):
    """R-ALG-4/5: each critic's clipped term uses its own old prediction."""
    model = small_cartpole(clip_range_vf=0.05, vf_clip_mode="per_quantile")
    _, est = rollout_and_estimates(model)
    mb = est.data
    # make critic 2 predict (and have predicted) one unit higher than critic 1
    with torch.no_grad():
        model.policy.critic_outs[1].bias += 1.0
    old = mb.old_critic.clone()
    old[1] = old[1] + 1.0
    mb.old_critic = old
    ctx = UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
    )
    with torch.no_grad():
        _, stats, _ = minibatch_loss(ctx, mb)
        out, _, _ = model.policy.critic_sequence(mb.obs, mb.episode_starts, mb.state)
        K = out.shape[-1]
        tgt = mb.targets.reshape(-1)

        def loss_of(c, old_c):
            return model.critic.value_loss(
                out[c].reshape(-1, K), old_c.reshape(-1, K), tgt, 0.05, "per_quantile"
            )[0]

        own = 0.5 * (loss_of(0, old[0]) + loss_of(1, old[1]))
        swapped = 0.5 * (loss_of(0, old[1]) + loss_of(1, old[0]))
    assert float(stats["value_loss"]) == pytest.approx(float(own), rel=1e-6)
    assert abs(float(own) - float(swapped)) > 1e-4


def test_gaussian_entropy_sums_dims_once():
    """R-ALG-2: a 3-dim Gaussian's entropy equals the sum of the per-dimension entropies."""
    mean = torch.randn(5, 3)
    log_std = torch.tensor([-0.5, 0.1, 0.7])
    d = DiagGaussianDist(mean, log_std)
    ref = torch.distributions.Normal(mean, log_std.exp()).entropy().sum(-1)
    assert d.entropy().shape == (5,)
    torch.testing.assert_close(d.entropy(), ref)
    a = torch.randn(5, 3)
    torch.testing.assert_close(
        d.log_prob(a), torch.distributions.Normal(mean, log_std.exp()).log_prob(a).sum(-1)
    )


@pytest.mark.parametrize("sharing", ["none", "critics", "all"])
def test_lstm_gradient_norms_count_each_parameter_once(sharing, small_cartpole):
    """Audit finding #7: each module's own parameters, no parameter in two LSTM groups."""
    model = small_cartpole(lstm_sharing=sharing)
    groups = param_groups(model.policy)
    lstm_ids = [id(p) for k, v in groups.items() if k.startswith("lstm_") for p in v]
    assert len(lstm_ids) == len(set(lstm_ids))
    for name, lstm in model.policy.lstm_modules().items():
        assert {id(p) for p in groups[f"lstm_{name}"]} == {id(p) for p in lstm.parameters()}
    all_ids = {id(p) for p in model.policy.parameters()}
    assert set(lstm_ids) <= all_ids


def test_group_grad_norms_equal_a_per_group_reference(small_cartpole):
    model = small_cartpole()
    model.learn(64)
    groups = param_groups(model.policy)
    for p in model.policy.parameters():
        p.grad = torch.randn_like(p)
    got = group_grad_norms(groups)
    for name, params in groups.items():
        ref = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
        assert got[name] == pytest.approx(ref, rel=1e-6)


def truncating_cartpole(**kw):
    """CartPole cut at 5 steps (2 envs x 16 steps): several truncations per rollout."""
    return DistributionalPPO(
        "CartPole-v1",
        seed=1,
        n_envs=2,
        n_steps=16,
        batch_size=32,
        lstm_hidden_size=16,
        kwargs={"max_episode_steps": 5},
        **kw,
    )


def test_truncation_bootstraps_from_final_obs_with_post_step_state(rollout_and_estimates):
    """R-ALG-6: V(final obs | state after the last step), not the reset."""
    model = truncating_cartpole()
    rollout, est = rollout_and_estimates(model)
    assert rollout.truncated.any()
    values = est.values
    # reference: step-by-step critic loop per env, from the rollout's start state
    pol, crit, sc = model.policy, model.critic, est.scaling  # PopArt: same raw values
    from riskppo.nn.policy import RecurrentState as RS
    from riskppo.nn.recurrent import LSTMState

    T, N = rollout.rewards.shape
    with torch.no_grad():
        for i in range(N):
            vf = tuple(
                LSTMState(s.h[:, i : i + 1], s.c[:, i : i + 1]) for s in rollout.start_state.vf
            )
            pi0 = rollout.start_state.pi.select(slice(i, i + 1))  # unused: critics' own LSTM
            for t in range(T):
                out, vf = pol.critic_step(
                    rollout.obs[t, i : i + 1], RS(pi0, vf), rollout.episode_starts[t, i : i + 1]
                )
                v = sc.to_raw(crit.mean(out).min(0).values)[0]
                assert float(v) == pytest.approx(float(values[t, i]), abs=1e-5)
                if rollout.truncated[t, i]:
                    k = int(
                        (
                            (rollout.final_index[:, 0] == t) & (rollout.final_index[:, 1] == i)
                        ).nonzero()[0]
                    )
                    f_out, _ = pol.critic_step(
                        rollout.final_obs[k : k + 1], RS(pi0, vf), torch.zeros(1)
                    )
                    expected = sc.to_raw(crit.mean(f_out).min(0).values)[0]
                    # recompute GAE's bootstrap term from est: δ uses next_values
                    reset_out, _ = pol.critic_step(
                        rollout.final_obs[k : k + 1], RS(pi0, vf), torch.ones(1)
                    )
                    wrong = sc.to_raw(crit.mean(reset_out).min(0).values)[0]
                    adv = est.advantages[t, i]
                    gamma = model.config.ppo.gamma
                    # the truncated step's advantage is its own δ (done cuts the recursion)
                    delta = rollout.rewards[t, i] + gamma * expected - values[t, i]
                    assert float(adv) == pytest.approx(float(delta), abs=1e-4)
                    assert abs(float(expected) - float(wrong)) > 1e-7


def test_same_seed_gives_bit_identical_weights(small_cartpole):
    """R-REL-7: same seed → bit-identical parameters after N updates on CPU."""
    params = []
    for _ in range(2):
        m = small_cartpole(seed=3)
        m.learn(256)
        params.append(torch.cat([p.detach().flatten() for p in m.policy.parameters()]))
        m.close()
    assert torch.equal(params[0], params[1])
    m = small_cartpole(seed=4)
    m.learn(256)
    other = torch.cat([p.detach().flatten() for p in m.policy.parameters()])
    assert not torch.equal(params[0], other)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"cvar_alpha": 1.5}, "cvar_alpha"),
        ({"cvar_alpha": 0.0}, "cvar_alpha"),
        ({"critic": "gaussian"}, "critic.kind"),
        ({"n_envs": 0}, "n_envs"),
        ({"batch_size": 100}, "batch_size"),
        ({"bogus_option": 1}, "bogus_option"),
    ],
)
def test_invalid_config_raises_before_env_is_built(kw, field):
    with pytest.raises(ConfigError, match=field):
        DistributionalPPO("NoSuchEnv-v0", **kw)


def test_save_load_roundtrip_predicts_identically(tmp_path, small_cartpole):
    model = small_cartpole()
    model.learn(256)
    path = model.save(tmp_path / "ckpt")
    assert {
        "manifest.json",
        "config.json",
        "state.json",
        "model.safetensors",
        "optimizer.safetensors",
        "normalizer.safetensors",
    } <= {p.name for p in path.iterdir()}
    loaded = DistributionalPPO.load(path)  # no env: predict only
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    a1, s1 = model.predict(obs, deterministic=True)
    a2, s2 = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(a1, a2)
    torch.testing.assert_close(s1.pi.h, s2.pi.h)
    _, v1 = model.value_distribution(obs)
    _, v2 = loaded.value_distribution(obs)
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    assert loaded.num_timesteps == model.num_timesteps


class MultiDiscreteEnv(gym.Env):
    """Reward 1 when both action components match the observed target bits."""

    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.MultiDiscrete([2, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.target = self.np_random.integers(0, 2, size=2)
        return self.target.astype(np.float32), {}

    def step(self, action):
        r = float(np.all(np.asarray(action) == self.target))
        self.t += 1
        self.target = self.np_random.integers(0, 2, size=2)
        return self.target.astype(np.float32), r, False, self.t >= 20, {}


@pytest.mark.parametrize(
    ("env", "critic"),
    [("Pendulum-v1", "quantile"), ("Pendulum-v1", "scalar"), (MultiDiscreteEnv, "categorical")],
)
def test_other_action_spaces_and_critics_train(env, critic, small_cartpole):
    model = (
        small_cartpole(env=env, critic=critic, state_dependent_std=True)
        if env == "Pendulum-v1"
        else small_cartpole(env=env, critic=critic)
    )
    model.learn(512)
    assert model.num_timesteps == 512
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())
    obs = model.env.reset()
    a, state = model.predict(obs, None, np.ones(obs.shape[0], bool))
    assert model.action_space.contains(a[0])
    taus, q = model.value_distribution(obs, state)
    assert q.shape == (obs.shape[0], len(taus))
    assert np.all(np.diff(q, axis=-1) >= -1e-6)


def test_exploding_learning_rate_fires_alerts(small_cartpole):
    """R-MON: a learning rate that explodes the ratio triggers warn/* alerts."""
    model = small_cartpole(
        learning_rate=1.0, max_grad_norm=1e6, n_epochs=8, max_nonfinite_updates=1000
    )
    model.learn(1024)
    fired = set(model.monitor.alerts)
    assert fired & {
        "log_ratio_clamp",
        "grad_norm_pre_clip",
        "loss_out_of_range",
        "entropy_collapse",
    }, fired
    assert "alerts during training" in model.monitor.summary()


class FaultyCartPole(gym.Wrapper):
    """CartPole whose ``at_step``-th step returns a NaN reward or a NaN in observation element 2."""

    def __init__(self, field: str, at_step: int):
        super().__init__(gym.make("CartPole-v1"))
        self.field, self.at_step, self.n = field, at_step, 0

    def step(self, a):
        obs, r, term, trunc, info = self.env.step(a)
        self.n += 1
        if self.n == self.at_step and self.field == "reward":
            r = math.nan
        if self.n == self.at_step and self.field == "obs":
            obs = obs.copy()
            obs[2] = np.nan
        return obs, r, term, trunc, info


NAN_OBS = partial(FaultyCartPole, field="obs", at_step=5)


def test_non_finite_reward_names_env_and_step(small_cartpole):
    model = small_cartpole(env=partial(FaultyCartPole, field="reward", at_step=7))
    from riskppo.envs.vec.build import NonFiniteInputError

    with pytest.raises(
        NonFiniteInputError, match=r"env \d+ returned a non-finite reward .* step 7"
    ):
        model.learn(256)


def test_awr_behaviour_cloning_is_logged_and_alerts_when_dominant(small_cartpole):
    """R-ALG-12: the AWR BC loss is trained and logged; a dominating BC term fires the alert."""
    mild = small_cartpole(bc_coef=0.01)
    mild.learn(256)
    assert math.isfinite(mild.monitor.latest["train/bc_loss"])
    assert 0.0 <= mild.monitor.latest["train/bc_loss_ratio"] < 0.8
    assert "bc_loss_ratio" not in mild.monitor.alerts
    heavy = small_cartpole(bc_coef=1000.0)
    heavy.learn(256)
    assert heavy.monitor.latest["train/bc_loss_ratio"] > 0.8
    assert "bc_loss_ratio" in heavy.monitor.alerts


@pytest.mark.parametrize("critic", ["quantile", "categorical"])
def test_cvar_constraint_runs_with_both_critics_and_segments(critic, small_cartpole):
    """R-RISK-2 with either critic, a recurrent policy and fixed-horizon segments."""
    model = small_cartpole(critic=critic, cvar_limit=10.0, cvar_alpha=0.1, cvar_horizon=8)
    model.learn(512)
    latest = model.monitor.latest
    for key in ("risk/lambda", "risk/cvar_pred_segment", "risk/var", "risk/cvar_violation"):
        assert math.isfinite(latest[key]), key
    assert latest["risk/lambda"] > 0.0  # CartPole 8-step segments return ≤ 8 < the limit 10
    assert latest["risk/cvar_adv_abs_mean"] > 0.0  # the CVaR advantage carries a signal


class WrongShapeEnv(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class OldApiEnv:
    """A pre-Gymnasium env: reset() returns obs only, step() a 4-tuple."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self):
        return np.zeros(2, np.float32)

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, {}


def test_wrong_observation_shape_is_a_clear_error_before_training(small_cartpole):
    model = small_cartpole(env=WrongShapeEnv)
    with pytest.raises(ValueError, match=r"shape \(3,\), but its observation_space has shape"):
        model.learn(64)  # raised at the first reset, before any update
    assert model.n_updates == 0


class TextObsEnv(WrongShapeEnv):
    """Right shape, but not numbers."""

    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        return np.array(list("abcd")), {}


def test_non_numeric_observation_is_a_clear_error(small_cartpole):
    model = small_cartpole(env=TextObsEnv)
    with pytest.raises(ValueError, match="reset\\(\\) returned a non-numeric observation"):
        model.learn(64)


def test_old_api_env_is_refused_before_training(small_cartpole):
    with pytest.raises((ValueError, TypeError), match=r"(?i)gymnasium|gym"):
        small_cartpole(env=OldApiEnv)


def test_nan_observation_raises_naming_env_step_and_field(small_cartpole):
    from riskppo.envs.vec.build import NonFiniteInputError

    model = small_cartpole(env=NAN_OBS, normalize_obs=True)
    with pytest.raises(NonFiniteInputError, match=r"env \d+ .*observation \(element 2 = nan\)"):
        model.learn(256)


def test_skip_policy_keeps_normaliser_and_weights_finite(small_cartpole):
    from riskppo.envs.vec.build import VecFiniteGuard, find_normalizer

    model = small_cartpole(env=NAN_OBS, normalize_obs=True, nonfinite_policy="skip")
    model.learn(512)
    rms = find_normalizer(model.env).obs_rms
    assert np.isfinite(rms.mean).all() and np.isfinite(rms.var).all()
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())
    guard = model.env.guard  # held inside the normaliser (FiniteVecNormalize)
    assert isinstance(guard, VecFiniteGuard) and guard.n_skipped > 0


def test_non_finite_gradients_skip_the_update_then_stop(small_cartpole):
    """R-REL-6: NaN gradients → the update is skipped (nothing applied), then a clear stop."""

    model = small_cartpole(max_nonfinite_updates=3)
    # PopArt legitimately rescales the critics' output layers every rollout: leave them out.
    popart = {id(p) for layer in model.policy.critic_out_layers for p in layer.parameters()}
    params = [p for p in model.policy.parameters() if id(p) not in popart]
    before = [p.detach().clone() for p in params]
    params[0].register_hook(lambda g: g * float("nan"))
    with pytest.raises(NonFiniteTrainingError, match="3 consecutive minibatches"):
        model.learn(1024)
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)  # no optimizer step was applied


def _first_minibatch_stats(model, est):
    ctx = UpdateContext(
        model.config, model.policy, model.critic, model.optimizer, model.state.rng.shuffle, 0.0
    )
    L = est.data.obs.shape[0]
    mb = next(est.data.minibatches(model.config.ppo.batch_size // L, model.state.rng.shuffle))
    with torch.no_grad():
        _, stats, n_bad = minibatch_loss(ctx, mb)
    assert n_bad == 0
    return stats


@pytest.mark.parametrize(
    ("critic", "mode", "popart"),
    [
        ("quantile", "per_quantile", False),
        ("quantile", "mean_only", False),
        ("quantile", "mean_and_variance", False),
        ("categorical", "mean_only", False),
        ("scalar", "mean_only", False),
        ("quantile", "per_quantile", True),
    ],
)
def test_value_clipping_does_not_fire_before_any_step(
    critic, mode, popart, small_cartpole, rollout_and_estimates
):
    """(R-ALG-5/8) before any optimizer step the critic's outputs equal its old
    predictions, so no sample is value-clipped — with PopArt off as well as on. Mutation: convert
    the old predictions to the new units whenever ``critic.supports_popart`` (not when PopArt
    actually rescaled the outputs)."""
    model = small_cartpole(critic=critic, popart=popart, clip_range_vf=0.05, vf_clip_mode=mode)
    scale_before = model.state.scaling.scale
    _, est = rollout_and_estimates(model)
    assert est.scaling.scale != pytest.approx(scale_before, rel=0.1)  # the units did change
    stats = _first_minibatch_stats(model, est)
    assert float(stats["vf_clip_fraction"]) == 0.0
    assert float(stats["clip_fraction"]) == 0.0
    model.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_lstm_sharing_all_runs_on_cuda(small_cartpole):
    """with ``lstm_sharing="all"`` on CUDA, collect's actor latents, the critic's value
    distribution and the attacked agent's episode starts are allocated on the model's device.
    Mutation: drop ``device=`` from any of them (a device-mismatch error). Skipped without CUDA."""
    from riskppo.evaluation.robustness import AttackedAgent

    model = small_cartpole(lstm_sharing="all", device="cuda")
    model.learn(2 * 4 * 32)
    obs = model.env.reset()
    taus, values = model.value_distribution(obs)
    assert values.shape == (4, model.critic.n_out) and taus.shape == (model.critic.n_out,)
    agent = AttackedAgent(model, "random", 0.05)
    actions, state = agent.predict(obs, None, np.ones(4, dtype=bool))
    assert actions.shape == (4,) and state.pi.h.device.type == "cuda"
    model.close()


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
    model = truncating_cartpole(lstm_sharing="all")
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
