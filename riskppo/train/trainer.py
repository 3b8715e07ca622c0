"""``DistributionalPPO``: recurrent, distributional, twin-critic PPO, SB3-like API (SPEC §1.1).

The training loop reads like the algorithm (SPEC §11)::

    collect → estimate → (risk) → update → log → checkpoint
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from riskppo import core
from riskppo.config import Config, ConfigError, check_rollout_memory, set_by_path
from riskppo.nn.critics import Critic, build_critic
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.optim import build_optimizer
from riskppo.train.bc import BCSource, attach_bc
from riskppo.train.checkpoint import load_checkpoint, save_checkpoint
from riskppo.train.collect import env_actions, obs_tensor
from riskppo.train.compiled import CompiledLoss
from riskppo.train.episodes import run_episodes
from riskppo.train.loop import (
    Learner,
    learning_rate,
    reset_carry,
    set_learning_rate,
    train_iteration,
)
from riskppo.train.metrics import UpdateLog
from riskppo.train.monitor import Monitor, check_steps_continue, log_update
from riskppo.train.outputs import check_finite_outputs
from riskppo.train.predict_args import check_state, episode_starts
from riskppo.train.progress import fmt, training_progress, whole_rollouts
from riskppo.train.settings import (
    build_vgs,
    config_from_keywords,
    entropy_target,
    optimizer_kwargs,
    warn_alpha_resolution,
)
from riskppo.train.state import TrainingState, initial_training_state
from riskppo.train.vec_env import EnvSpec, build_vec_env, find_normalizer


class DistributionalPPO:
    """Recurrent distributional PPO. See SPEC §1.1 for the API and §2 for the algorithm.

    A façade (like SB3's algorithm classes): it owns what is trained — the policy, the critic
    kind, the optimizer, the env — and one :class:`~riskppo.train.state.TrainingState`; the loop
    itself is :func:`riskppo.train.loop.train_iteration`.
    """

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
        # the compiled minibatch loss (``compile: true``, issue 18): one per model, compiled on
        # first use; every learner of this model gets it while the config asks for it
        self.compiled_loss = CompiledLoss()
        self.bc: BCSource | None = None  # R-ALG-12: a demonstration file or a teacher
        if self.env is not None:  # (a predict-only model needs no demonstrations)
            attach_bc(self)
        warn_alpha_resolution(cfg, self.critic.n_out)
        try:
            entropy_target(cfg, act_space)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        # everything that changes between updates, besides weights and optimizer (issue 15)
        self.state: TrainingState = initial_training_state(
            cfg, self.n_envs, risk=self.policy.has_risk_head
        )
        self.run_dir = Path(run_dir) if run_dir else _tb_dir(cfg)
        self.monitor: Monitor | None = None
        self._obs_rms_loaded: Any = None
        self.loaded_from: Path | None = None  # the checkpoint directory of ``load``, if any

    @property
    def num_timesteps(self) -> int:
        """Env steps trained so far (all envs counted)."""
        return self.state.counters.num_timesteps

    @property
    def n_updates(self) -> int:
        return self.state.counters.n_updates

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
        recurrent/env state of the previous call (or of a loaded checkpoint). ``callback(model,
        log)`` runs after every update (``log``: :class:`~riskppo.train.metrics.UpdateLog`);
        returning ``False`` stops training.
        """
        if self.env is None:
            raise RuntimeError(
                "this model has no environment (loaded for predict only): pass env= to "
                "DistributionalPPO.load() to train it"
            )
        if total_timesteps < 1:
            raise ConfigError(f"total_timesteps must be >= 1, got {total_timesteps}")
        start_steps = 0 if reset_num_timesteps else self.num_timesteps
        if self.run_dir is not None:  # before anything changes: its step count must not go back
            check_steps_continue(self.run_dir, start_steps)
        if reset_num_timesteps:
            self.state = self.state.with_counters(num_timesteps=0).replace(carry=None)
        self.state = self.state.with_counters(schedule_total=start_steps + total_timesteps)
        if self.config.num_threads is not None:
            torch.set_num_threads(self.config.num_threads)
        if self.monitor is None:
            self.monitor = Monitor(self.run_dir, tensorboard=self.run_dir is not None)
        planned = whole_rollouts(total_timesteps, self.config.ppo.n_steps * self.n_envs)
        with training_progress(planned, progress_bar) as bar:
            while self.num_timesteps < start_steps + total_timesteps:
                log = self._iterate()
                bar.update(
                    completed=self.num_timesteps - start_steps,
                    fps=fmt(self.monitor.latest["time/fps"], ",.0f"),
                    ret=fmt(log.ep_rew_mean, ".2f"),
                )
                stop = callback is not None and callback(self, log) is False
                if self._at_checkpoint_boundary():
                    # R-REL-4: the envs are re-seeded and reset after every checkpoint (after the
                    # callback that saves it), so a run resumed from that checkpoint continues
                    # exactly like this one. The last rollout was already bootstrapped from its
                    # final observation, like a time-limit truncation.
                    self.state = self.state.replace(carry=None)
                if stop:
                    break
        if self.config.monitor.verbose:
            print(self.monitor.summary())
        return self

    def learner(self) -> Learner:
        """What :func:`~riskppo.train.loop.train_iteration` trains (needs an env)."""
        if self.env is None:
            raise RuntimeError("this model has no environment (loaded for predict only)")
        loss_fn = self.compiled_loss if self.config.compile else None
        return Learner(
            self.config,
            self.policy,
            self.critic,
            self.optimizer,
            self.vgs,
            self.env,
            self.bc,
            loss_fn,
        )

    def _iterate(self) -> UpdateLog:
        """collect → estimate → update (:func:`train_iteration`) → log."""
        assert self.monitor is not None
        learner = self.learner()
        if self.state.carry is None:
            self.state = reset_carry(learner, self.state)
        t0 = time.perf_counter()
        self.state, log = train_iteration(learner, self.state)
        fps = self.config.ppo.n_steps * self.n_envs / (time.perf_counter() - t0)
        log_update(self.monitor, log, self.config, fps)
        return log

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
        set_learning_rate(self.optimizer, learning_rate(self.config, self.state))
        if "ppo.ent_coef" in values:
            ent = dataclasses.replace(
                self.state.entropy,
                coef=self.config.ppo.ent_coef,
                schedule=core.EntropyScheduleState(),
            )
            self.state = self.state.replace(entropy=ent)

    def reset_rollout(self) -> None:
        """Start fresh episodes with zero recurrent states at the next update (envs re-seeded
        from seed + update count), e.g. after the weights were replaced (PBT exploit)."""
        self.state = self.state.replace(carry=None)

    def _at_checkpoint_boundary(self) -> bool:
        every = self.config.checkpoint.every_updates
        return every is not None and self.n_updates % every == 0

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
        episode just started (state reset inside the LSTM). A state of another batch size,
        dtype or device, or an ``episode_start`` of another length, raises ``ValueError``
        (:mod:`riskppo.train.predict_args`).
        """
        obs, lead = self._obs_array(observation, max_lead=1)
        single = lead == 0
        if single:
            obs = obs[None]
        obs_t = obs_tensor(obs, self.device)
        n = obs_t.shape[0]
        if state is None:
            state = self.policy.initial_state(n, self.device)
        rows = f"observation has {n} row(s)"
        state = check_state(self.policy, state, n, "predict", rows)
        starts = episode_starts(episode_start, (n,), self.device, "predict")
        with torch.inference_mode():
            step = self.policy.act(
                obs_t,
                state.pi,
                starts,
                deterministic=deterministic,
                generator=self.state.rng.sample,
            )
        check_finite_outputs(self.loaded_from, action_distribution=step.log_prob)
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
        a categorical critic is converted by its inverse CDF at the same levels). ``state`` and
        ``episode_start`` are checked as in :meth:`predict` (``ValueError``).
        """
        arr, lead = self._obs_array(obs, max_lead=2)
        x = torch.as_tensor(arr, device=self.device).reshape(*arr.shape[:lead], -1)
        for _ in range(2 - lead):
            x = x.unsqueeze(0)  # → [T, B, D]
        T, B = x.shape[:2]
        if state is None:
            state = self.policy.initial_state(B, self.device)
        where = "value_distribution"
        state = check_state(self.policy, state, B, where, f"obs holds {B} env(s) per step")
        starts = episode_starts(episode_start, (T, B), self.device, where)
        with torch.inference_mode():
            out, _, _ = self.policy.critic_sequence(x, starts, state)
            out = out[: self.policy.n_critics]
            n_levels = self.critic.n_out if self.config.critic.kind == "quantile" else 32
            taus = core.quantile_midpoints(n_levels, device=x.device)
            means = self.critic.mean(out)  # [C, T, B]
            pick = means.argmin(dim=0)  # twin: the pessimistic critic
            chosen = out.gather(0, pick[None, ..., None].expand(1, *out.shape[1:]))[0]
            q = self.state.scaling.to_raw(self.critic.quantiles(chosen, taus))
        check_finite_outputs(self.loaded_from, value_quantiles=q)
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
                self.state = self.state.replace(carry=None)
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
        model = load_checkpoint(cls, Path(path), env, rebuild_env=rebuild_env, **overrides)
        model.loaded_from = Path(path)
        return model

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None


def _flat_size(space: spaces.Space) -> int:
    return int(np.prod(space.shape)) if space.shape else 1


def _tb_dir(cfg: Config) -> Path | None:
    return Path(cfg.monitor.tensorboard_log) if cfg.monitor.tensorboard_log else None
