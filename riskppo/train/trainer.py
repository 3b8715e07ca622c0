"""``DistributionalPPO``: recurrent, distributional, twin-critic PPO, SB3-like API (SPEC §1.1).

The training loop reads like the algorithm (SPEC §11)::

    collect → estimate → (risk) → update → log → checkpoint
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from riskppo import core
from riskppo.adversarial.regularizer import sa_eps
from riskppo.config import Config, ConfigError, check_rollout_memory, set_by_path
from riskppo.nn.critics import Critic, build_critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.optim import build_optimizer
from riskppo.train.checkpoint import load_checkpoint, save_checkpoint
from riskppo.train.collect import CollectorState, collect_rollout, env_actions, obs_tensor
from riskppo.train.episodes import run_episodes
from riskppo.train.estimate import Estimates, estimate
from riskppo.train.monitor import Monitor, check_alerts
from riskppo.train.progress import fmt, training_progress
from riskppo.train.risk import RiskState, initial_risk_state
from riskppo.train.scaling import ReturnScaling, initial_scaling
from riskppo.train.settings import (
    ENT_FLOOR_COEF_MIN,
    build_vgs,
    config_from_keywords,
    ent_schedule,
    entropy_target,
    floor_coef,
    optimizer_kwargs,
    step_entropy_floor,
    warn_alpha_resolution,
)
from riskppo.train.update import UpdateContext, UpdateMetrics, ppo_update
from riskppo.train.vec_env import EnvSpec, build_vec_env, find_normalizer


class DistributionalPPO:
    """Recurrent distributional PPO. See SPEC §1.1 for the API and §2 for the algorithm."""

    def __init__(
        self,
        env: EnvSpec | None = None,
        *,
        config: Config | dict[str, Any] | None = None,
        run_dir: str | Path | None = None,
        _spaces: tuple[spaces.Space, spaces.Space] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = config_from_keywords(config, **kwargs)
        cfg = self.config
        if env is None and _spaces is None:
            env = cfg.env.id
        if isinstance(env, str):
            self.config = cfg = config_from_keywords(cfg, id=env)
        self.device = torch.device(cfg.device)
        # What evaluation envs are made from: the id, or the user's factory / VecEnv.
        self._env_spec: EnvSpec = env if env is not None else cfg.env.id
        # whether the env is config env.id (what load() can rebuild), not a factory / VecEnv
        self.env_is_id: bool = env is None or isinstance(env, str)
        self.env: VecEnv | None = (
            build_vec_env(env, cfg.env, cfg.seed, cfg.data) if env is not None else None
        )
        if self.env is not None:
            obs_space, act_space = self.env.observation_space, self.env.action_space
            self.n_envs = self.env.num_envs
        else:
            assert _spaces is not None
            obs_space, act_space = _spaces
            self.n_envs = cfg.env.n_envs
        self.observation_space, self.action_space = obs_space, act_space
        # a rollout buffer that cannot fit is a ConfigError now, not an allocation failure later
        check_rollout_memory(cfg, _flat_size(obs_space), _flat_size(act_space))
        self.critic: Critic = build_critic(cfg.critic)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.policy = RecurrentActorCritic(
                obs_space,
                act_space,
                cfg.policy,
                n_critics=2 if cfg.critic.twin else 1,
                critic_out=self.critic.n_out,
                risk_head=cfg.risk.cvar_limit is not None,
            ).to(self.device)
        self.reset_optimizer()
        self.sample_gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.seed + 2)
        self.scaling: ReturnScaling = initial_scaling(cfg)
        self.risk_state: RiskState | None = (
            initial_risk_state(cfg, self.n_envs) if self.policy.has_risk_head else None
        )
        warn_alpha_resolution(cfg, self.critic.n_out)
        try:
            entropy_target(cfg, act_space)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.ent_state = core.EntropyScheduleState()
        self.ent_coef = cfg.ppo.ent_coef
        self.ent_floor = core.EntropyFloorState(math.log(ENT_FLOOR_COEF_MIN))
        self.num_timesteps = 0
        self.n_updates = 0
        # R-ALG-9 / R-REL-6: non-finite minibatches skipped in a row, carried across updates
        self.nonfinite_skips = 0
        self.run_dir = Path(run_dir) if run_dir else _tb_dir(cfg)
        self.ep_returns: deque[float] = deque(maxlen=100)
        self.ep_lengths: deque[int] = deque(maxlen=100)
        self._carry: CollectorState | None = None
        self.monitor: Monitor | None = None
        self.last_estimates: Estimates | None = None
        self._obs_rms_loaded: Any = None

    # ---- training -----------------------------------------------------------------------
    def learn(
        self,
        total_timesteps: int,
        *,
        progress_bar: bool = False,
        reset_num_timesteps: bool = True,
        callback: Any = None,
    ) -> DistributionalPPO:
        """Train for ``total_timesteps`` environment steps (all envs counted).

        With ``reset_num_timesteps=False`` training continues the counters, schedules and
        recurrent/env state of the previous call (or of a loaded checkpoint).
        """
        if self.env is None:
            raise RuntimeError(
                "this model has no environment (loaded for predict only): pass env= to "
                "DistributionalPPO.load() to train it"
            )
        if total_timesteps < 1:
            raise ConfigError(f"total_timesteps must be >= 1, got {total_timesteps}")
        if reset_num_timesteps:
            self.num_timesteps = 0
            self._carry = None
        target = self.num_timesteps + total_timesteps
        self._total_for_schedule = target
        if self.config.num_threads is not None:
            torch.set_num_threads(self.config.num_threads)
        if self.monitor is None:
            self.monitor = Monitor(self.run_dir, tensorboard=self.run_dir is not None)
        start_steps = self.num_timesteps
        with training_progress(total_timesteps, progress_bar) as bar:
            while self.num_timesteps < target:
                if self._carry is None:
                    self._carry = self._reset_carry()
                t0 = time.perf_counter()
                metrics = self.train_one_update()
                fps = self.config.ppo.n_steps * self.n_envs / (time.perf_counter() - t0)
                self.monitor.record("time/fps", fps)
                bar.update(
                    completed=self.num_timesteps - start_steps,
                    fps=fmt(fps, ",.0f"),
                    ret=fmt(self._mean_return(), ".2f"),
                )
                if self.n_updates % self.config.monitor.log_interval == 0:
                    self.monitor.dump(self.num_timesteps)
                stop = callback is not None and callback(self, metrics) is False
                if self._at_checkpoint_boundary():
                    # R-REL-4: the envs are re-seeded and reset after every checkpoint (after the
                    # callback that saves it), so a run resumed from that checkpoint continues
                    # exactly like this one. The last rollout was already bootstrapped from its
                    # final observation, like a time-limit truncation.
                    self._carry = None
                if stop:
                    break
        if self.config.monitor.verbose:
            print(self.monitor.summary())
        return self

    def train_one_update(self) -> UpdateMetrics:
        """One iteration: collect → estimate → update → log."""
        assert self.env is not None and self._carry is not None and self.monitor is not None
        cfg = self.config
        self._apply_lr_schedule()
        chunk_len = cfg.ppo.chunk_len
        rollout, carry, episodes = collect_rollout(
            self.policy, self.env, self._carry, cfg.ppo.n_steps, chunk_len, self.sample_gen
        )
        self.num_timesteps += cfg.ppo.n_steps * self.n_envs
        self.ep_returns.extend(episodes.returns)
        self.ep_lengths.extend(episodes.lengths)
        est = estimate(cfg, self.policy, self.critic, self.scaling, rollout, self.risk_state)
        if est.risk is not None:
            self.risk_state = est.risk.state
        self._carry = dataclasses.replace(carry, state=RecurrentState(carry.state.pi, est.vf_state))
        self.scaling = est.scaling
        ctx = UpdateContext(
            cfg,
            self.policy,
            self.critic,
            self.optimizer,
            self.shuffle_gen,
            self.ent_coef + self._floor_coef(),
            self.vgs,
            sa_eps=self._sa_eps(self.n_updates),
            consecutive_skips=self.nonfinite_skips,
        )
        metrics = ppo_update(ctx, est.data)
        self.nonfinite_skips = metrics.consecutive_skips
        self.n_updates += 1
        self.last_estimates = est
        self._log_update(est, metrics, rollout.costs_fraction)
        if metrics.means:
            self.ent_coef, self.ent_state = core.entropy_coef_step(
                ent_schedule(cfg), self.ent_state, metrics.means["entropy"]
            )
            self.ent_floor = step_entropy_floor(  # R-ALG-10: learned entropy floor
                cfg, self.action_space, self.ent_floor, metrics.means["entropy"]
            )
        return metrics

    def _floor_coef(self) -> float:
        return floor_coef(self.config, self.action_space, self.ent_floor)

    def _sa_eps(self, n_updates: int) -> float:
        """ε of the SA-PPO regulariser at update ``n_updates`` (0 when it is off)."""
        a = self.config.adversarial
        return sa_eps(a.eps, a.eps_warmup_updates, n_updates) if a.kappa > 0 else 0.0

    def reset_optimizer(self) -> None:
        """A fresh optimizer (and VGS) for the policy, at the config's learning rate."""
        cfg = self.config
        self.optimizer = build_optimizer(
            cfg.optim.optimizer,
            self.policy.parameters(),
            lr=cfg.ppo.learning_rate,
            weight_decay=cfg.optim.weight_decay,
            **optimizer_kwargs(cfg),
        )
        self.vgs = build_vgs(cfg, self.policy)

    def set_hyperparams(self, values: dict[str, float]) -> None:
        """Apply hyperparameters given as dotted config paths (e.g. ``{"ppo.learning_rate":
        1e-4}``) so that the very next update uses them (R-PBT-1).

        The config is re-validated; the learning rate goes into every optimizer param group
        (and is what the lr schedule starts from); a new ``ppo.ent_coef`` restarts the entropy
        schedule from it.
        """
        data = self.config.to_dict()
        for path, value in values.items():
            set_by_path(data, path, value)
        self.config = Config.build(data)
        self._apply_lr_schedule()
        if "ppo.ent_coef" in values:
            self.ent_coef = self.config.ppo.ent_coef
            self.ent_state = core.EntropyScheduleState()

    def reset_rollout(self) -> None:
        """Start fresh episodes with zero recurrent states at the next update (envs re-seeded
        from seed + update count), e.g. after the weights were replaced (PBT exploit)."""
        self._carry = None
        self.last_estimates = None

    def _at_checkpoint_boundary(self) -> bool:
        every = self.config.checkpoint.every_updates
        return every is not None and self.n_updates % every == 0

    def _reset_carry(self) -> CollectorState:
        """Reset every env with seeds derived from (seed, update count) and zero the LSTMs."""
        assert self.env is not None
        self.env.seed(self.config.seed + self.n_updates)
        obs = obs_tensor(self.env.reset(), self.device)
        if self.risk_state is not None:  # the reset ends every open CVaR segment
            self.risk_state.acc.zero_()
            self.risk_state.length.zero_()
        n = obs.shape[0]
        return CollectorState(
            obs,
            torch.ones(n, dtype=torch.bool, device=self.device),
            self.policy.initial_state(n, self.device),
        )

    def _apply_lr_schedule(self) -> None:
        p = self.config.ppo
        lr = p.learning_rate
        if p.lr_schedule == "linear":
            total = max(getattr(self, "_total_for_schedule", 1), 1)
            lr = p.learning_rate * max(1.0 - self.num_timesteps / total, 0.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _mean_return(self) -> float | None:
        return float(np.mean(self.ep_returns)) if self.ep_returns else None

    def _log_update(self, est: Estimates, m: UpdateMetrics, costs: torch.Tensor) -> None:
        mon, cfg = self.monitor, self.config
        assert mon is not None
        mon.record_many("train/", m.means)
        mon.record("train/ent_coef", self.ent_coef)
        target = entropy_target(cfg, self.action_space)
        if target is not None:
            mon.record("train/target_entropy", target)
            mon.record("train/ent_floor_coef", self._floor_coef())
            if self.ent_floor.below >= cfg.monitor.entropy_floor_binding_updates:
                mon.alert(
                    "entropy_floor_binding",
                    f"mean entropy below the floor {target:.3f} for {self.ent_floor.below} "
                    f"updates (coefficient {self._floor_coef():.3g})",
                )
        if cfg.adversarial.kappa > 0:
            mon.record("train/sa_eps", self._sa_eps(self.n_updates - 1))
        mon.record("train/learning_rate", self.optimizer.param_groups[0]["lr"])
        mon.record("train/explained_variance", est.explained_variance)
        mon.record("train/advantages_norm_mean", est.adv_stats.mean)
        mon.record("train/advantages_norm_std", est.adv_stats.std)
        mon.record("train/advantages_norm_max_abs", est.adv_stats.max_abs)
        mon.record("train/value_target_scale", est.scaling.scale)
        mon.record("train/ret_mean", est.scaling.mean)
        mon.record("train/ret_std", float(est.scaling.moments.var.sqrt()))
        mon.record("train/n_updates", self.n_updates)
        mon.record("time/total_timesteps", self.num_timesteps)
        mon.record("error/log_ratio_nonfinite", m.n_skipped_nonfinite_ratio)
        mon.record("error/nonfinite_loss_or_grad", m.n_skipped_nonfinite_loss)
        if self.vgs is not None:
            for name, f in self.vgs.last_factors.items():
                mon.record(f"train/vgs_scale/{name}", f)
        for name in self.policy.lstm_modules():
            state = self._carry.state if self._carry else None
            if state is None:
                break
            h = state.pi.h if name == "actor" else state.vf[_vf_index(name)].h
            for layer in range(h.shape[0]):
                mon.record(f"lstm/{name}_layer{layer}_norm", float(h[layer].norm(dim=-1).mean()))
                mon.record(f"lstm/{name}_layer{layer}_mean", float(h[layer].mean()))
                mon.record(f"lstm/{name}_layer{layer}_std", float(h[layer].std()))
        self._log_risk(est)
        if self.ep_returns:
            mon.record("rollout/ep_rew_mean", float(np.mean(self.ep_returns)))
            mon.record("rollout/ep_len_mean", float(np.mean(self.ep_lengths)))
        finite_costs = costs[torch.isfinite(costs)]
        if finite_costs.numel():
            mon.record("rollout/reward_costs_fraction", float(finite_costs.mean()))
        n_bad = int((~torch.isfinite(costs)).sum()) if finite_costs.numel() else 0
        if n_bad and finite_costs.numel():
            mon.record("warn/reward_costs_fraction_nonfinite", n_bad)
        t = cfg.monitor
        if est.adv_stats.max_abs > t.adv_max_abs:
            mon.alert(
                "advantage_outliers",
                f"max |normalised advantage| {est.adv_stats.max_abs:.1f} > {t.adv_max_abs}",
            )
        if est.uncapped_scale > cfg.critic.scale_cap:
            mon.alert(
                "excessive_return_scaling",
                f"uncapped value-target scale {est.uncapped_scale:.3g} > cap "
                f"{cfg.critic.scale_cap} (returns have a tiny spread)",
            )
        means = dict(m.means)
        if isinstance(self.action_space, spaces.Box) and "entropy" in means:
            means["entropy_per_dim"] = means["entropy"] / int(np.prod(self.action_space.shape))
        check_alerts(mon, t, means, discrete=not isinstance(self.action_space, spaces.Box))

    def _log_risk(self, est: Estimates) -> None:
        """R-RISK-1: critic-predicted CVaR per state and empirical CVaR of episode returns."""
        mon, alpha = self.monitor, self.config.risk.cvar_alpha
        assert mon is not None
        taus = core.quantile_midpoints(max(self.critic.n_out, 32), device=est.critic_out.device)
        # the rollout-time outputs in raw units: de-normalised with the scaling they were
        # produced under, not the one this rollout's statistics update made
        per_critic = [
            core.cvar_from_quantiles(est.out_scaling.to_raw(self.critic.quantiles(o, taus)), alpha)
            for o in est.critic_out[: self.policy.n_critics]
        ]  # each critic's CVaR per state, then the pessimistic one (twin critics)
        cvar_states = torch.stack(per_critic).min(dim=0).values
        mon.record("risk/cvar_pred", float(cvar_states.mean()))
        if est.risk is not None:
            mon.record_many("", est.risk.metrics)
        if len(self.ep_returns) >= 2:
            cvar, var = core.empirical_cvar(torch.tensor(list(self.ep_returns)), alpha)
            mon.record("risk/cvar_empirical", float(cvar))
            mon.record("risk/var_empirical", float(var))

    # ---- inference ----------------------------------------------------------------------
    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, RecurrentState]:
        """Actions for a batch of observations (or one), carrying the recurrent state explicitly.

        ``observation`` is one observation (the observation space's shape, e.g. ``[D]``; returns
        one action) or a batch ``[B, D]`` (returns ``[B, ...]`` actions). ``state`` is what the
        previous call returned (``None`` = zeros); ``episode_start`` ``[B]`` marks envs whose
        episode just started (state reset inside the LSTM).
        """
        obs, lead = self._obs_array(observation, max_lead=1)
        single = lead == 0
        if single:
            obs = obs[None]
        obs_t = obs_tensor(obs, self.device)
        n = obs_t.shape[0]
        if state is None:
            state = self.policy.initial_state(n, self.device)
        starts = (
            torch.zeros(n, device=self.device)
            if episode_start is None
            else torch.as_tensor(np.asarray(episode_start, dtype=np.float32), device=self.device)
        )
        with torch.inference_mode():
            step = self.policy.act(
                obs_t, state.pi, starts, deterministic=deterministic, generator=self.sample_gen
            )
        actions = env_actions(step.actions, self.action_space)
        new_state = RecurrentState(step.pi_state, state.vf)
        return (actions[0] if single else actions), new_state

    def value_distribution(
        self, obs: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The critic's predicted return distribution per observation (SPEC §1.1).

        ``obs`` is one observation ``[D]`` (values ``[K]``), a batch ``[B, D]`` (one step,
        ``state`` carried by the caller; values ``[B, K]``) or a sequence ``[T, B, D]`` from
        ``state`` (values ``[T, B, K]``). Returns ``(taus [K], values)``: quantile levels and
        de-normalised return quantiles (twin critics: the critic with the lower mean per state;
        a categorical critic is converted by its inverse CDF at the same levels).
        """
        arr, lead = self._obs_array(obs, max_lead=2)
        x = torch.as_tensor(arr, device=self.device).reshape(*arr.shape[:lead], -1)
        for _ in range(2 - lead):
            x = x.unsqueeze(0)  # → [T, B, D]
        T, B = x.shape[:2]
        if state is None:
            state = self.policy.initial_state(B, self.device)
        starts = torch.zeros(T, B, device=self.device)
        if episode_start is not None:
            starts = torch.as_tensor(
                np.asarray(episode_start, dtype=np.float32), device=self.device
            ).reshape(T, B)
        with torch.inference_mode():
            out, _, _ = self.policy.critic_sequence(x, starts, state)
            out = out[: self.policy.n_critics]
            n_levels = self.critic.n_out if self.config.critic.kind == "quantile" else 32
            taus = core.quantile_midpoints(n_levels, device=x.device)
            means = self.critic.mean(out)  # [C, T, B]
            pick = means.argmin(dim=0)  # twin: the pessimistic critic
            chosen = out.gather(0, pick[None, ..., None].expand(1, *out.shape[1:]))[0]
            q = self.scaling.to_raw(self.critic.quantiles(chosen, taus))
        values = q.cpu().numpy()
        return taus.cpu().numpy(), values.reshape(*values.shape[2 - lead :])

    def _obs_array(self, observation: Any, max_lead: int) -> tuple[np.ndarray, int]:
        """``observation`` as float32 and its number of leading axes before the observation
        space's shape: 0 (one observation), 1 (a batch ``[B, ...]``), 2 (a sequence
        ``[T, B, ...]``), at most ``max_lead``; any other shape raises ``ValueError``."""
        obs = np.asarray(observation, dtype=np.float32)
        shape = tuple(self.observation_space.shape or ())
        lead = obs.ndim - len(shape)
        if not 0 <= lead <= max_lead or obs.shape[lead:] != shape:
            allowed = ["one observation " + str(list(shape)), "a batch " + str(["B", *shape])]
            if max_lead == 2:
                allowed.append("a sequence " + str(["T", "B", *shape]))
            raise ValueError(
                f"observation of shape {list(obs.shape)} does not fit the observation space "
                f"{list(shape)}: pass " + ", ".join(allowed)
            )
        return obs, lead

    def make_eval_env(
        self, part: str = "test", n_envs: int = 1, env: EnvSpec | None = None
    ) -> VecEnv:
        """A fresh VecEnv for evaluation: the configured env (for trading, the ``part`` period run
        start to end), with this model's observation statistics frozen (never updated)."""
        spec = env if env is not None else self._env_spec
        if isinstance(spec, VecEnv):
            return spec  # a user's VecEnv cannot be cloned: evaluate on it as it is
        venv = build_vec_env(
            spec,
            self.config.env,
            self.config.seed + 10_000,
            self.config.data,
            part=part,
            n_envs=n_envs,
        )
        target = find_normalizer(venv)
        source = find_normalizer(self.env) if self.env is not None else self._obs_rms_loaded
        if target is not None:
            target.training = False
            if source is not None:
                target.obs_rms = source.obs_rms.copy()
        return venv

    def evaluate(
        self,
        n_episodes: int = 10,
        deterministic: bool = True,
        env: EnvSpec | None = None,
        part: str = "val",
    ) -> dict[str, float]:
        """Mean/std/CVaR_α of the raw returns of ``n_episodes`` full episodes.

        Runs on a fresh evaluation env (``make_eval_env``: the configured env, or ``env``; for
        trading the ``part`` period) with frozen observation statistics, so the training env
        and its normaliser are untouched.
        """
        venv = self.make_eval_env(part=part, n_envs=min(n_episodes, 4), env=env)
        try:
            returns = run_episodes(self, venv, n_episodes, deterministic)
        finally:
            if venv is not self.env:
                venv.close()
            else:  # a user-supplied VecEnv was used for evaluation: start training afresh
                self._carry = None
        r = torch.tensor(returns, dtype=torch.float64)
        alpha = self.config.risk.cvar_alpha
        cvar, _ = core.empirical_cvar(r, alpha) if len(r) else (torch.tensor(math.nan),) * 2
        return {
            "mean": float(r.mean()),
            "std": float(r.std()) if len(r) > 1 else 0.0,
            "cvar": float(cvar),
            "min": float(r.min()),
            "max": float(r.max()),
            "n_episodes": float(len(r)),
        }

    # ---- persistence --------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write a checkpoint directory (safetensors + JSON, never pickle; SPEC §1.4)."""
        return save_checkpoint(self, Path(path))

    @classmethod
    def load(
        cls,
        path: str | Path,
        env: EnvSpec | None = None,
        *,
        rebuild_env: bool = True,
        **overrides: Any,
    ) -> DistributionalPPO:
        """Load a checkpoint directory; ``env`` is optional for ``predict``.

        Without ``env``, a model that was trained on a registered env id gets that env rebuilt
        from the checkpoint's config (``env.*``, ``seed``, ``data``; one log line says so), so
        ``load(path).learn(n, reset_num_timesteps=False)`` continues training — with
        ``checkpoint.every_updates`` set and a checkpoint saved at such a boundary, exactly as
        if it had never stopped. ``rebuild_env=False`` skips that (predict only, nothing built).
        ``overrides`` are constructor keywords (e.g. ``run_dir``).
        """
        return load_checkpoint(cls, Path(path), env, rebuild_env=rebuild_env, **overrides)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None


def _flat_size(space: spaces.Space) -> int:
    return int(np.prod(space.shape)) if space.shape else 1


def _vf_index(name: str) -> int:
    return int(name.removeprefix("critic") or 1) - 1


def _tb_dir(cfg: Config) -> Path | None:
    return Path(cfg.monitor.tensorboard_log) if cfg.monitor.tensorboard_log else None
