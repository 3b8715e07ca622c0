"""Behaviour cloning from rollouts, demonstration files or a teacher (R-ALG-12).

``bc.source`` picks what the auxiliary loss ``bc_coef · L_BC`` clones:

* ``rollout`` (default): the agent's own actions, each with the AWR weight
  ``w = exp(min(A/β, log max_weight))`` of its raw advantage (clamped **before** ``exp``), so the
  better actions dominate; ``L_BC = −mean(w · log π(a|s))`` on the PPO minibatch itself.
* ``file``: a recorded demonstration set (:mod:`riskppo.demos.files`, ``riskppo record``).
* ``teacher``: a strategy's action on the agent's **own** observations: the env is wrapped in a
  :class:`~riskppo.envs.teacher.TeacherRecorder` that labels every observation it returns
  with the teacher's action (a built-in ``bc.teacher`` baseline of the trading env, or a user
  callable passed to ``DistributionalPPO.attach_bc``) and keeps the last ``2 · ppo.n_steps``
  steps.

Demonstrations carry no advantages: they are cloned with weight 1, or with
``bc.weighting: return`` with the AWR weight of their standardised return-to-go
(``exp(min(z/β, log max_weight))``, ``z = (R − mean R) / std R``; files with ``returns`` only).

**Recurrent-correct.** Demonstrations run through the actor LSTM like rollouts: once per update
(before its first minibatch) the whole ``[T, N]`` set is replayed through the actor LSTM from a zero
state with its own episode starts, capturing the state entering every chunk of ``ppo.bptt_len``
steps; each minibatch then samples as many ``[L, ·]`` chunks as the PPO minibatch has and replays
them from those states — the same layout and cost as a rollout minibatch, no per-sample loop.
Teacher sets only sample chunks of the latest ``ppo.n_steps`` steps, the older half being the
LSTM's burn-in (exact wherever an episode started inside the window).

**Schedule.** ``bc_coef`` decays linearly to 0 over ``bc.decay_steps`` env steps (``None``:
constant), so PPO takes over from the demonstrator. ``train/bc_loss``, ``train/bc_coef`` and
``train/bc_loss_ratio`` (share of the BC term in the loss magnitude; alert above
``monitor.bc_loss_ratio``) are logged.

The source is an explicit component: :func:`bc_source` loads and validates the file, or wraps
the env, and returns the :class:`BCSource` (``DistributionalPPO.attach_bc``, called when the
model is built, adopts both); the training loop turns it into one update's :class:`BCInputs`
(:func:`bc_inputs`: the decayed coefficient and the replayed demonstrations) and
:class:`BCTerm` (:func:`bc_term`) is the BC part of the minibatch loss, eager and compiled
alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from torch import Tensor

from riskppo import core
from riskppo.algo.buffer import ChunkBatch
from riskppo.algo.losses import (
    LossTerm,
    TermInput,
    awr_loss,
    bc_loss_ratio,
    other_terms_size,
)
from riskppo.config import BCConfig, Config, ConfigError
from riskppo.demos.types import Demonstrations
from riskppo.envs.vec.build import find_normalizer
from riskppo.nn.policy import RecurrentActorCritic
from riskppo.nn.recurrent import LSTMState

__all__ = [
    "BCInputs",
    "BCSource",
    "BCTerm",
    "bc_coef_at",
    "bc_inputs",
    "bc_source",
    "bc_term",
]


class _Context(Protocol):
    """What :func:`bc_term` reads of the update context (``riskppo.algo.update``)."""

    @property
    def cfg(self) -> Config: ...
    @property
    def policy(self) -> RecurrentActorCritic: ...
    @property
    def generator(self) -> torch.Generator | None: ...
    @property
    def bc(self) -> BCInputs | None: ...


# ---- attaching a source -----------------------------------------------------------------------


@dataclass
class DemoChunks:
    """One update's demonstrations, chunked ``[L, C, ...]`` with the actor state entering each."""

    obs: Tensor  # [L, C, D] normalised like the agent's observations
    actions: Tensor  # [L, C, *A]
    starts: Tensor  # [L, C] bool
    weights: Tensor  # [L, C]
    state: LSTMState  # [layers, C, H]
    usable: Tensor  # [U] chunk indices that minibatches sample from


@dataclass(frozen=True)
class BCSource:
    """A demonstration source of the learner (``bc.source: file | teacher``; the rollout source
    needs none): what :func:`prepare_demos` replays once per update."""

    demos: Callable[[], Demonstrations | None]  # the current demonstrations (None: none yet)
    normalizer: VecNormalize | None = None  # the agent's observation normaliser
    sample_last: int | None = None  # sample only chunks of the latest steps (teacher)


@dataclass(frozen=True)
class BCInputs:
    """What one update's BC term reads (``UpdateContext.bc``)."""

    coef: float  # bc_coef at this update (after the decay)
    from_demos: bool  # file or teacher source (else: the rollout's own actions, AWR)
    demos: DemoChunks | None = None  # this update's chunked demonstrations (None: none yet)


def bc_source(
    config: Config,
    env: VecEnv | None,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    teacher: Callable[[Any], Any] | None = None,
    *,
    teacher_input: Literal["bar", "obs"] = "bar",
) -> tuple[VecEnv | None, BCSource | None]:
    """The env to train on and the demonstration source that ``config.bc`` asks for
    (``DistributionalPPO.attach_bc`` adopts both).

    ``file``: load and validate ``bc.path`` against the spaces; the env is ``env``. ``teacher``:
    ``env`` wrapped in a :class:`~riskppo.envs.teacher.TeacherRecorder` labelling with the
    ``bc.teacher`` baseline or with ``teacher``, a user function of the bar index
    (``teacher_input="bar"``) or of the raw observation (``"obs"``) returning the action target
    (:func:`~riskppo.envs.teacher.callable_teacher`). Otherwise ``(env, None)``.

    Raises:
        ConfigError: a teacher without ``bc.source: teacher``, no teacher at all, a baseline
            teacher on a non-trading env, ``weighting: return`` without returns.
        DemonstrationError: an unusable demonstration file.
    """
    cfg = config.bc
    if teacher is not None and cfg.source != "teacher":
        raise ConfigError(f"a teacher callable needs bc.source: teacher (got {cfg.source!r})")
    # The file reader (pyarrow) and the trading teachers (pandas) are imported only by the source
    # that needs them: ≈ 70 MB of RSS a run without them does not pay (docs/benchmarks.md).
    if cfg.source == "file":
        from riskppo.demos.files import load_demonstrations

        assert cfg.path is not None  # BCConfig validates it
        demos = load_demonstrations(cfg.path, observation_space, action_space)
        if cfg.weighting == "return" and demos.returns is None:
            raise ConfigError(f"bc.weighting: return needs 'returns' in {cfg.path}")
        normalizer = find_normalizer(env) if env is not None else None
        return env, BCSource(lambda: demos, normalizer)
    if cfg.source == "teacher" and env is not None and (teacher or cfg.teacher):
        if cfg.weighting == "return":
            raise ConfigError("bc.weighting: return needs a demonstration file with returns")
        from riskppo.envs.teacher import teacher_recorder

        n_steps = config.ppo.n_steps
        recorder = teacher_recorder(env, cfg, 2 * n_steps, teacher, teacher_input)
        return recorder, BCSource(recorder.recorded, find_normalizer(recorder), sample_last=n_steps)
    return env, None


# ---- the loss ---------------------------------------------------------------------------------


def bc_coef_at(cfg: BCConfig, steps: int) -> float:
    """``bc_coef`` after ``steps`` env steps: linear to 0 over ``decay_steps`` (or constant)."""
    if cfg.decay_steps is None:
        return cfg.bc_coef
    return cfg.bc_coef * max(0.0, 1.0 - steps / cfg.decay_steps)


def bc_inputs(
    cfg: Config, policy: RecurrentActorCritic, source: BCSource | None, num_timesteps: int
) -> BCInputs | None:
    """The BC term's inputs for the next update (None: no BC term). Demonstrations are replayed
    through the actor LSTM here, once per update, with the current weights."""
    if cfg.bc.bc_coef <= 0:
        return None
    if cfg.bc.source != "rollout" and source is None:
        what = "bc.path" if cfg.bc.source == "file" else "bc.teacher (a baseline) or a callable"
        raise ConfigError(
            f"bc.source: {cfg.bc.source} needs {what}: pass it to "
            "model.attach_bc(...) before training"
        )
    coef = bc_coef_at(cfg.bc, num_timesteps)
    demos = prepare_demos(policy, cfg, source) if source is not None and coef > 0 else None
    return BCInputs(coef, source is not None, demos)


def bc_term(
    ctx: _Context, mb: ChunkBatch, log_prob: Tensor, others: Tensor,
    coef: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:  # fmt: skip
    """The BC term ``coef · L_BC`` of one (micro-)batch and its stats.

    ``log_prob`` ``[L·B]``: the PPO forward's log-probabilities of ``mb``'s actions (the rollout
    source reuses them); ``others`` (0-dim): the magnitude of the other loss terms, for
    ``bc_loss_ratio``; ``coef``: ``ctx.bc.coef`` unless given — a 0-dim tensor in the compiled
    loss, where ``ctx.bc`` is None (the rollout source, AWR). Only the actor (LSTM, MLP, action
    head) gets gradient from it.
    """
    bc, cfg = ctx.bc, ctx.cfg.bc
    if coef is None:
        assert bc is not None
        coef = bc.coef
    if isinstance(coef, float) and coef == 0.0:  # decayed to 0: nothing to compute or draw
        zero = log_prob.new_zeros(())
        return zero, {"bc_loss": zero, "bc_loss_ratio": zero, "bc_coef": zero}
    if bc is not None and bc.from_demos:
        bc_loss = _demo_loss(ctx, bc.demos, mb.n_chunks)
    else:
        bc_loss = awr_loss(mb.raw_advantages, log_prob, cfg.beta, cfg.max_weight)
    if isinstance(coef, Tensor):  # no branch on its value: 0 must not multiply an inf
        bc_loss = torch.where(coef != 0.0, bc_loss, torch.zeros_like(bc_loss))
    term = coef * bc_loss
    stats = {
        "bc_loss": bc_loss.detach(),
        "bc_loss_ratio": bc_loss_ratio(term, others),
        "bc_coef": coef.to(term.dtype) if isinstance(coef, Tensor) else log_prob.new_tensor(coef),
    }
    return term, stats


class BCTerm(LossTerm):
    """The behaviour-cloning term (R-ALG-12) as a loss term: on while the update has BC inputs;
    compiled for the rollout source (AWR) only."""

    name = "bc"

    def enabled(self, ctx: Any) -> bool:
        return ctx.bc is not None

    def coef(self, ctx: Any) -> float:
        return float(ctx.bc.coef)

    def not_compiled(self, ctx: Any) -> str | None:
        if ctx.bc is not None and ctx.bc.from_demos:
            return (
                "BC from demonstrations (bc.source: file | teacher) samples chunks with a "
                "generator per minibatch, which is not compiled"
            )
        return None

    def compute(self, x: TermInput) -> tuple[Tensor, dict[str, Tensor]]:
        others = other_terms_size(x.base, x.weights)
        return bc_term(x.ctx, x.mb, x.fwd.log_prob, others, x.coef)


def _demo_loss(ctx: _Context, ch: DemoChunks | None, n_chunks: int) -> Tensor:
    """``−mean(w · log π(a_demo | s_demo))`` over ``n_chunks`` sampled demonstration chunks."""
    if ch is None:  # nothing recorded yet
        return ctx.policy.action_head.net.weight.sum() * 0.0
    n = len(ch.usable)
    pick = (
        torch.randperm(n, generator=ctx.generator)[:n_chunks]
        if n_chunks <= n
        else torch.randint(n, (n_chunks,), generator=ctx.generator)
    )
    idx = ch.usable[pick].to(ch.obs.device)
    dist, _, _ = ctx.policy.actor_sequence(ch.obs[:, idx], ch.starts[:, idx], ch.state.select(idx))
    actions = ch.actions[:, idx]
    log_prob = dist.log_prob(actions.reshape(-1, *actions.shape[2:]))
    return -(ch.weights[:, idx].reshape(-1) * log_prob).mean()


def prepare_demos(policy: RecurrentActorCritic, cfg: Config, source: BCSource) -> DemoChunks | None:
    """Normalise, chunk and replay the source's demonstrations through the actor LSTM."""
    demos = source.demos()
    if demos is None:
        return None
    device = next(policy.parameters()).device
    L = cfg.ppo.chunk_len
    T, N = demos.shape
    obs = demos.observations
    if source.normalizer is not None:
        flat = source.normalizer.normalize_obs(obs.reshape(T * N, -1).numpy())
        obs = torch.as_tensor(np.asarray(flat, dtype=np.float32)).reshape(T, N, -1)
    weights = _weights(demos.returns, cfg.bc) if cfg.bc.weighting == "return" else None
    # the per-step weights ride in the ``returns`` slot, so that they are chunked alike
    demos = Demonstrations(
        obs.to(device),
        demos.actions.to(device),
        demos.episode_starts.to(device),
        torch.ones(T, N, device=device) if weights is None else weights.to(device),
    )
    ch = demos.chunks(L)  # the last T_used steps
    T_used = T // L * L
    states = chunk_states(
        policy, demos.observations[T - T_used :], demos.episode_starts[T - T_used :], L
    )
    n_chunks = T_used // L
    last = source.sample_last
    first = 0 if last is None else max(0, n_chunks - math.ceil(last / L))
    assert ch.returns is not None
    return DemoChunks(
        ch.observations,
        ch.actions,
        ch.episode_starts,
        ch.returns,
        states,
        torch.arange(first * N, n_chunks * N),
    )


# Steps x sequences the actor LSTM replays at once: its gates take 16 bytes per hidden unit and
# row, so a whole demonstration file at once took ~50x the file (hidden 64, 4 observations).
REPLAY_ROWS = 16_384


def chunk_states(policy: RecurrentActorCritic, obs: Tensor, starts: Tensor, L: int) -> LSTMState:
    """The actor LSTM's state at the start of each ``L``-step chunk of ``obs`` ``[T, N, D]``
    (``T`` a multiple of ``L``), chunks time-major → ``[layers, T/L·N, H]``.

    The demonstrations are replayed in blocks of whole chunks (about ``REPLAY_ROWS`` steps x
    sequences), each block starting from the previous one's final state: memory is bounded by
    the block, not the file; the states are those of one replay of the whole sequence.
    """
    T, N = obs.shape[:2]
    lstm = policy.actor_lstm
    state = lstm.initial_state(N, obs.device)
    h = state.h.new_empty(state.h.shape[0], T // L * N, state.h.shape[2])
    c = torch.empty_like(h)
    block = L * max(1, REPLAY_ROWS // (L * N))
    with torch.no_grad():
        for t0 in range(0, T, block):
            t1 = min(T, t0 + block)
            _, state, captured = lstm(
                obs[t0:t1], state, policy.starts(starts[t0:t1]), capture=range(0, t1 - t0, L)
            )
            for t, s in captured.items():  # copied out at once: no small tensors pile up
                col = (t0 + t) // L * N
                h[:, col : col + N] = s.h
                c[:, col : col + N] = s.c
    return LSTMState(h, c)


def _weights(returns: Tensor | None, cfg: BCConfig) -> Tensor:
    """AWR weights of the standardised returns-to-go ``[T, N]``."""
    if returns is None:
        raise ConfigError("bc.weighting: return needs demonstrations with returns")
    z = (returns - returns.mean()) / (returns.std() + 1e-8) if returns.numel() > 1 else returns
    return core.awr_weights(z, beta=cfg.beta, max_weight=cfg.max_weight)
