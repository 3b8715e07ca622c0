"""``DistributionalPPO``: recurrent, distributional, twin-critic PPO, SB3-like API (design §1.1).

The training loop reads like the algorithm (design §11)::

    collect → estimate → (risk) → update → log → checkpoint
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from riskppo import core
from riskppo.agent.loading import Persistent
from riskppo.agent.sb3_compat import (
    LearnCallbacks,
    config_and_env,
    config_from_keywords,
    next_run_dir,
    set_env_mismatch,
)
from riskppo.algo.bc import BCSource, bc_source
from riskppo.algo.collect import StopRollout
from riskppo.algo.compiled import CompiledLoss
from riskppo.algo.constraints import needs_risk_head
from riskppo.algo.log import UpdateLog
from riskppo.algo.loop import (
    Learner,
    learning_rate,
    reset_carry,
    set_learning_rate,
    train_iteration,
)
from riskppo.algo.settings import (
    apply_num_threads,
    build_vgs,
    entropy_target,
    optimizer_kwargs,
    warn_alpha_resolution,
)
from riskppo.algo.state import TrainingState, initial_training_state
from riskppo.config import Config, ConfigError, check_rollout_memory, set_by_path
from riskppo.config.data import TRADING_ID
from riskppo.envs.episodes import run_episodes
from riskppo.envs.registration import env_kind
from riskppo.envs.vec.build import EnvSpec, build_vec_env, find_normalizer, sb3_view
from riskppo.envs.vec.tensors import env_actions, obs_tensor
from riskppo.monitor.progress import fmt, training_progress, whole_rollouts
from riskppo.monitor.writer import Monitor, check_steps_continue, log_update
from riskppo.nn.critics import Critic, build_critic
from riskppo.nn.outputs import check_finite_outputs
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.predict_args import check_state, episode_starts, given_obs, obs_array
from riskppo.optim import build_optimizer

if TYPE_CHECKING:
    import pandas as pd


class DistributionalPPO(Persistent):
    """Recurrent distributional PPO. See design §1.1 for the API and §2 for the algorithm.

    A façade (like SB3's algorithm classes): it owns what is trained — the policy, the critic
    kind, the optimizer, the env — and one :class:`~riskppo.algo.state.TrainingState`; the loop
    itself is :func:`riskppo.algo.loop.train_iteration`.

    ``DistributionalPPO(env, ...)`` or, as RecurrentPPO, ``DistributionalPPO("MlpLstmPolicy",
    env, ...)`` (``args``: :func:`~riskppo.agent.sb3_compat.policy_and_env`). ``env``: an env id
    (``"CartPole-v1"``, ``"module:Name-v1"``), a factory, a ``VecEnv``, a Gymnasium vector env
    (``gymnasium.make_vec``; :mod:`riskppo.envs.vec.gym_vector`) or one ``gym.Env`` instance (with
    ``n_envs=1``); none: the config's ``env.id``. ``config``: a :class:`Config`, a dict or the
    path of a YAML file; keywords set single fields. What SB3's keywords and methods become here:
    :mod:`riskppo.agent.sb3_compat` and ``docs/sb3.md``. ``df``: a pandas DataFrame of bars (and
    ``data.signals`` columns) that ``riskppo/Trading-v0`` trades instead of ``data.path``, in
    training and evaluation envs alike (``docs/data.md``).
    """

    def __init__(
        self,
        *args: Any,
        env: EnvSpec | gym.Env | None = None,
        config: Config | dict[str, Any] | str | Path | None = None,
        run_dir: str | Path | None = None,
        df: pd.DataFrame | None = None,
        _spaces: tuple[spaces.Space, spaces.Space] | None = None,
        **kwargs: Any,
    ) -> None:
        self.config, env = config_and_env(args, env, config, kwargs, _spaces is None)
        cfg = self.config
        trades = env if env is not None else cfg.env.id
        if df is not None and not getattr(env_kind(trades), "single_asset", False):
            raise ConfigError(f"df= (a DataFrame of bars) is for env {TRADING_ID}, not {trades}")
        self.df = df  # the user's bars, or None: the data section's file or dataset
        # before anything is built: the orthogonal initialisation's QR (and so the weights of a
        # given seed) depends on torch's thread count, which an earlier model may have changed
        apply_num_threads(cfg)
        self.device = torch.device(cfg.device)
        # What evaluation envs are made from: the id, or the user's factory / VecEnv.
        self._env_spec: EnvSpec = cfg.env.id
        # whether the env is config env.id (what load() can rebuild), not a factory / VecEnv
        self.env_is_id = True
        self.env: VecEnv | None = self._build_env(env) if env is not None else None
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
        self.policy = self._build_policy(obs_space, act_space)
        self.reset_optimizer()
        # the compiled minibatch loss (``compile: true``): one per model, compiled on
        # first use; every learner of this model gets it while the config asks for it
        self.compiled_loss = CompiledLoss()
        self.bc: BCSource | None = None  # R-ALG-12: a demonstration file or a teacher
        if self.env is not None:  # (a predict-only model needs no demonstrations)
            self.attach_bc()
        warn_alpha_resolution(cfg, self.critic.n_out)
        try:
            entropy_target(cfg, act_space)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        # everything that changes between updates, besides weights and optimizer
        self.state: TrainingState = initial_training_state(cfg, self.n_envs)
        self.run_dir = Path(run_dir) if run_dir else None
        # without run_dir: tensorboard_log/<tb_log_name>_<N>, a new N per run (as in SB3)
        self._tb_root = _tb_dir(cfg) if not run_dir else None
        self.monitor: Monitor | None = None
        self.rollout_steps = 0  # env steps of a rollout under way (seen by SB3 callbacks)
        self.loaded_obs_rms: RunningMeanStd | None = None  # from a checkpoint, for evaluation envs
        self.loaded_from: Path | None = None  # the checkpoint directory of ``load``, if any

    def _build_policy(
        self, obs_space: spaces.Space, act_space: spaces.Space
    ) -> RecurrentActorCritic:
        """The actor-critic network, initialised from ``config.seed`` alone (torch's global
        generator is left as it was)."""
        cfg = self.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            return RecurrentActorCritic(
                obs_space,
                act_space,
                cfg.policy,
                n_critics=2 if cfg.critic.twin else 1,
                critic_out=self.critic.n_out,
                risk_head=needs_risk_head(cfg),
            ).to(self.device)

    def _build_env(self, env: EnvSpec | gym.Env) -> VecEnv:
        """The training VecEnv for ``env``; remembers what evaluation envs are made from (a
        ``gym.Env`` instance or a ``VecEnv`` is evaluated on as it is)."""
        cfg = self.config
        venv = build_vec_env(env, cfg.env, cfg.seed, cfg.data, risk=cfg.risk, frame=self.df)
        self._env_spec = venv if isinstance(env, gym.Env | VectorEnv) else env
        self.env_is_id = isinstance(env, str)
        return venv

    @property
    def num_timesteps(self) -> int:
        """Env steps trained so far (all envs counted); during a rollout, SB3 callbacks also see
        the steps collected so far (``rollout_steps``)."""
        return self.state.counters.num_timesteps + self.rollout_steps

    # ---- SB3's accessors ----------------------------------------------------------------
    def get_env(self) -> VecEnv | None:
        """The training VecEnv as SB3 would have built it, without riskppo's finite-value guard
        (:func:`~riskppo.envs.vec.build.sb3_view`: SB3's ``EvalCallback`` compares it with its
        eval env); ``None`` for a model loaded for ``predict`` only."""
        return sb3_view(self.env) if self.env is not None else None

    def get_vec_normalize_env(self) -> VecNormalize | None:
        """The observation normaliser of the training env (``env.normalize_obs``), if any."""
        return find_normalizer(self.env) if self.env is not None else None

    def set_env(self, env: EnvSpec | gym.Env) -> None:
        """Train on ``env`` from the next ``learn`` (like SB3's ``set_env``): an id, a factory, a
        ``VecEnv`` or a ``gym.Env`` instance with this model's spaces and number of envs
        (``ValueError`` otherwise). Episodes start afresh; the observation statistics of a
        normaliser riskppo built carry over. The previous env is not closed (as in SB3):
        ``old = model.get_env()`` first, then ``old.close()``."""
        old_spec, old_is_id = self._env_spec, self.env_is_id
        venv = self._build_env(env)
        spaces_ = self.observation_space, self.action_space
        if (problem := set_env_mismatch(venv, *spaces_, self.n_envs)) is not None:
            self._env_spec, self.env_is_id = old_spec, old_is_id
            venv.close()
            raise ValueError(problem)
        source, target = self.get_vec_normalize_env(), find_normalizer(venv)
        if source is not None and target is not None:
            target.obs_rms = source.obs_rms.copy()
        self.env = venv
        if isinstance(env, str):
            self.config = config_from_keywords(self.config, id=env)
        self.attach_bc()
        self.state = self.state.replace(carry=None)

    def attach_bc(
        self,
        teacher: Callable[[Any], Any] | None = None,
        *,
        teacher_input: Literal["bar", "obs"] = "bar",
    ) -> None:
        """Set the behaviour-cloning source that ``config.bc`` asks for (called when the model is
        built; call it again to pass your own teacher): ``bc.source: file`` loads ``bc.path``;
        ``bc.source: teacher`` wraps the env in a recorder labelling every observation with the
        ``bc.teacher`` baseline or with ``teacher``, a function of the bar index
        (``teacher_input="bar"``) or of the raw observation (``"obs"``)
        (:func:`~riskppo.algo.bc.bc_source`, which says what it raises)."""
        self.env, self.bc = bc_source(
            self.config,
            self.env,
            self.observation_space,
            self.action_space,
            teacher,
            teacher_input=teacher_input,
        )

    @property
    def logger(self) -> Any:
        """The SB3 ``Logger`` of this model's metrics (``logger.record(key, value)`` adds a scalar
        to the next dump into ``metrics.jsonl`` / TensorBoard); opened on first use."""
        return (self.monitor or self._open_monitor("DistributionalPPO", reset=True)).logger

    def _open_monitor(self, tb_log_name: str, reset: bool) -> Monitor:
        """The metrics writer of the next ``learn``: with ``tensorboard_log`` (and no
        ``run_dir``), a run that resets the step counter after one that logged gets a new
        ``<tb_log_name>_<N>`` folder (SB3's numbering); otherwise the current one goes on."""
        if self._tb_root is not None:
            if self.monitor is not None and reset and self.monitor.latest:
                self.monitor.close()
                self.monitor = None
            if self.monitor is None:
                self.run_dir = next_run_dir(self._tb_root, tb_log_name, continue_last=not reset)
        if self.monitor is None:
            self.monitor = Monitor(self.run_dir, tensorboard=self.run_dir is not None)
        return self.monitor

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
        tb_log_name: str = "DistributionalPPO",
        log_interval: int | None = None,
    ) -> DistributionalPPO:
        """Train for ``total_timesteps`` environment steps (all envs counted).

        With ``reset_num_timesteps=False`` training continues the counters, schedules and
        recurrent/env state of the previous call (or of a loaded checkpoint). ``callback``:
        ``callback(model, log)`` runs after every update (``log``:
        :class:`~riskppo.algo.log.UpdateLog`; returning ``False`` stops training), an SB3
        ``BaseCallback`` gets SB3's hooks, a list may hold both
        (:class:`~riskppo.agent.sb3_compat.LearnCallbacks`). ``tb_log_name``: the run folder's
        name under ``tensorboard_log``. ``log_interval``: updates between metric dumps (sets
        ``monitor.log_interval``).
        """
        callbacks = LearnCallbacks(callback)
        start_steps = self._start_learning(total_timesteps, reset_num_timesteps, log_interval)
        monitor = self._open_monitor(tb_log_name, reset_num_timesteps)
        callbacks.start(self, {"total_timesteps": total_timesteps, "callback": callback})
        planned = whole_rollouts(total_timesteps, self.config.ppo.n_steps * self.n_envs)
        with training_progress(planned, progress_bar) as bar:
            while self.num_timesteps < start_steps + total_timesteps:
                try:
                    log = self._iterate(callbacks)
                except StopRollout:  # an SB3 callback's _on_step returned False
                    self.state = self.state.replace(carry=None)
                    break
                finally:
                    self.rollout_steps = 0
                bar.update(
                    completed=self.num_timesteps - start_steps,
                    fps=fmt(monitor.latest["time/fps"], ",.0f"),
                    ret=fmt(log.ep_rew_mean, ".2f"),
                )
                stop = not callbacks.after_update(self, log)
                if self._at_checkpoint_boundary():
                    # R-REL-4: the envs are re-seeded and reset after every checkpoint (after the
                    # callback that saves it), so a run resumed from that checkpoint continues
                    # exactly like this one. The last rollout was already bootstrapped from its
                    # final observation, like a time-limit truncation.
                    self.state = self.state.replace(carry=None)
                if stop:
                    break
        callbacks.end()
        if self.config.monitor.verbose:
            print(monitor.summary())
        return self

    def _start_learning(
        self, total_timesteps: int, reset_num_timesteps: bool, log_interval: int | None
    ) -> int:
        """Check that :meth:`learn` can run and set the counters it starts from; returns the
        step count it starts at."""
        if self.env is None:
            raise RuntimeError(
                "this model has no environment (loaded for predict only): pass env= to "
                "DistributionalPPO.load() to train it"
            )
        if total_timesteps < 1:
            raise ConfigError(f"total_timesteps must be >= 1, got {total_timesteps}")
        start_steps = 0 if reset_num_timesteps else self.num_timesteps
        if self.run_dir is not None and self._tb_root is None:
            # before anything changes: its step count must not go back (a tensorboard_log run
            # gets a fresh numbered folder when it resets instead)
            check_steps_continue(self.run_dir, start_steps)
        if reset_num_timesteps:
            self.state = self.state.with_counters(num_timesteps=0).replace(carry=None)
        self.state = self.state.with_counters(schedule_total=start_steps + total_timesteps)
        if log_interval is not None:
            self.config = config_from_keywords(self.config, log_interval=log_interval)
        apply_num_threads(self.config)  # another model may have changed it since __init__
        return start_steps

    def learner(self, callbacks: LearnCallbacks | None = None) -> Learner:
        """What :func:`~riskppo.algo.loop.train_iteration` trains (needs an env); the SB3
        callbacks of ``callbacks`` are called during collection."""
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
            None if callbacks is None else callbacks.hooks,
        )

    def _iterate(self, callbacks: LearnCallbacks | None = None) -> UpdateLog:
        """collect → estimate → update (:func:`train_iteration`) → log."""
        assert self.monitor is not None
        learner = self.learner(callbacks)
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

    def reset_counters(self) -> None:
        """Count env steps and updates from zero again (a warm start that trains a new run)."""
        self.state = self.state.with_counters(num_timesteps=0, n_updates=0)

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
        raw: bool = False,
    ) -> tuple[np.ndarray, RecurrentState]:
        """Actions for a batch of observations (or one), carrying the recurrent state explicitly.

        ``observation`` is one observation (the observation space's shape, e.g. ``[D]``; returns
        one action) or a batch ``[B, D]`` (returns ``[B, ...]`` actions). ``state`` is what the
        previous call returned (``None`` = zeros); ``episode_start`` ``[B]`` marks envs whose
        episode just started (state reset inside the LSTM). A state of another batch size,
        dtype or device, or an ``episode_start`` of another length, raises ``ValueError``
        (:mod:`riskppo.nn.predict_args`). ``raw=True``: env observations, normalised first.
        """
        obs, lead = obs_array(observation, self.observation_space, max_lead=1)
        obs = given_obs(self, obs, raw)  # raw=True: normalised here; else checked (warns once)
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

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """Raw env observations ``[..., D]`` as the policy gets them (frozen statistics)."""
        return given_obs(self, obs, raw=True)

    def value_distribution(
        self, obs: np.ndarray, state: Any = None, episode_start: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The critic's predicted return distribution per observation (design §1.1).

        ``obs`` is one observation ``[D]`` (values ``[K]``), a batch ``[B, D]`` (one step,
        ``state`` carried by the caller; values ``[B, K]``) or a sequence ``[T, B, D]`` from
        ``state`` (values ``[T, B, K]``). Returns ``(taus [K], values)``: quantile levels and
        de-normalised return quantiles (twin critics: the critic with the lower mean per state;
        a categorical critic is converted by its inverse CDF at the same levels). ``state`` and
        ``episode_start`` are checked as in :meth:`predict` (``ValueError``).
        """
        arr, lead = obs_array(obs, self.observation_space, max_lead=2)
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
            out = self.policy.value_outputs(out)
            n_levels = self.critic.n_out if self.config.critic.kind == "quantile" else 32
            taus = core.quantile_midpoints(n_levels, device=x.device)
            means = self.critic.mean(out)  # [C, T, B]
            pick = means.argmin(dim=0)  # twin: the pessimistic critic
            chosen = out.gather(0, pick[None, ..., None].expand(1, *out.shape[1:]))[0]
            q = self.state.scaling.to_raw(self.critic.quantiles(chosen, taus))
        check_finite_outputs(self.loaded_from, value_quantiles=q)
        values = q.cpu().numpy()
        return taus.cpu().numpy(), values.reshape(*values.shape[2 - lead :])

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
            risk=self.config.risk,
            frame=self.df,
        )
        target = find_normalizer(venv)
        source = self.obs_statistics()
        if target is not None:
            target.training = False
            if source is not None:
                target.obs_rms = cast(Any, source.copy())
        return venv

    def obs_statistics(self) -> RunningMeanStd | None:
        """The observation statistics this model normalises with: its training env's normaliser,
        or (without an env) those loaded from a checkpoint; ``None`` without normalisation."""
        if self.env is not None:
            vn = find_normalizer(self.env)
            return cast(RunningMeanStd, vn.obs_rms) if vn is not None else None
        return self.loaded_obs_rms

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
