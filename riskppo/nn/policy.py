"""Recurrent actor-critic with separate (or shared) actor and critic LSTMs (R-ALG-1, R-ALG-4).

The recurrent state is explicit: :class:`RecurrentState` goes in and comes out of every call,
nothing is kept on the module. ``lstm_sharing``:

* ``"critics"`` (default): one LSTM for the actor, one shared by the critic heads — measured
  faster and, on masked-velocity CartPole, more sample-efficient than ``"none"``
  (benchmarks/throughput.py, benchmarks/sample_efficiency.py);
* ``"none"``: one LSTM for the actor and one per critic (fully independent twin critics);
* ``"all"``: a single LSTM whose output feeds the actor and every critic head.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple, cast, overload

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from riskppo.config import PolicyConfig
from riskppo.nn.actor_step import CActorStep
from riskppo.nn.distributions import ActionDistribution, ActionHead
from riskppo.nn.recurrent import LSTMState, MaskedLSTM, fused_lstm_step, run_lstms

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}
# the same activations without a module call (the rollout step)
_FUNCTIONAL: dict[type[nn.Module], Callable[[Tensor], Tensor]] = {
    nn.Tanh: torch.tanh,
    nn.ReLU: torch.relu,
}


class RecurrentState(NamedTuple):
    """Actor state and one state per critic LSTM (empty when ``lstm_sharing='all'``)."""

    pi: LSTMState
    vf: tuple[LSTMState, ...]

    def select(self, idx: Tensor | slice) -> RecurrentState:
        return RecurrentState(self.pi.select(idx), tuple(s.select(idx) for s in self.vf))


class ActStep(NamedTuple):
    """Output of one rollout step for ``B`` envs."""

    actions: Tensor  # [B, *action_shape]
    log_prob: Tensor  # [B]
    pi_state: LSTMState  # state after this step
    # [B, H] what the critics read from the actor (its LSTM output) when they share its LSTM
    # (lstm_sharing='all'); None otherwise. Pass it back to critic_step / critic_sequence.
    critic_input: Tensor | None


class RolloutActor:
    """The actor's step with its weights taken once (R-ALG-15): the LSTM as one matmul per layer
    (:func:`~riskppo.nn.recurrent.fused_lstm_step`), the MLP as ``addmm`` + activation without
    module calls. Equal to the module path (the MLP and head bit for bit, the LSTM to float
    rounding). Where :mod:`riskppo.nn.actor_step` applies, the whole step is one C call instead
    (``c_step``; equal to float rounding, same random draws). Valid while the weights do not
    change: build one per rollout."""

    def __init__(self, policy: RecurrentActorCritic) -> None:
        self.lstm = policy.actor_lstm.step_weights()
        self.mlp: list[tuple[Tensor, Tensor] | Callable[[Tensor], Tensor]] = [
            (m.weight.t(), m.bias) if isinstance(m, nn.Linear) else _FUNCTIONAL.get(type(m), m)
            for m in policy.actor_mlp
        ]
        self.head = policy.action_head
        self.net = (self.head.net.weight.t(), self.head.net.bias)
        self.critics_read_actor = policy._critics_read_actor
        self.starts = policy.starts
        # the whole step in one C call where it applies (riskppo.nn.actor_step)
        self.c_step = CActorStep.build(self.lstm, policy.actor_mlp, self.head)

    def act(
        self,
        obs: Tensor,
        pi_state: LSTMState,
        episode_start: Tensor | np.ndarray,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> ActStep:
        """One step for ``B`` envs (:meth:`RecurrentActorCritic.act`); a NumPy ``episode_start``
        decides the reset without a tensor op."""
        episode_start = self.starts(episode_start)
        # the C step: float32 CPU observations, no gradient asked for (it has no backward)
        c_ok = obs.dtype == torch.float32 and obs.device.type == "cpu"
        if self.c_step is not None and c_ok and not torch.is_grad_enabled():
            actions, log_prob, state = self.c_step(
                obs, pi_state, episode_start, generator, deterministic
            )
            critic_input = state.h[0] if self.critics_read_actor else None
            return ActStep(actions, log_prob, state, critic_input)
        latent, new_state = fused_lstm_step(self.lstm, obs, pi_state, episode_start)
        x = latent
        for layer in self.mlp:
            x = torch.addmm(layer[1], x, layer[0]) if isinstance(layer, tuple) else layer(x)
        dist = self.head.distribution(torch.addmm(self.net[1], x, self.net[0]), x)
        actions = dist.mode() if deterministic else dist.sample(generator)
        critic_input = latent if self.critics_read_actor else None
        return ActStep(actions, dist.log_prob(actions), new_state, critic_input)


def mlp(in_dim: int, sizes: list[int], activation: str) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for size in sizes:
        layers += [nn.Linear(in_dim, size), _ACTIVATIONS[activation]()]
        in_dim = size
    return nn.Sequential(*layers), in_dim


def stacked_mlps(x: Tensor, heads: list[list[nn.Module]]) -> Tensor:
    """``C`` MLPs of the same shape as a few batched matmuls: ``x`` ``[N, in]`` (read by every
    head) or ``[C, N, in]`` → ``[C, N, out]``.

    Equal to ``torch.stack([head(x) ...])`` (up to float rounding); for the twin critic heads
    this is fewer and larger ops than one small MLP per head. ``heads[c]`` lists the modules of
    head ``c`` in order: ``nn.Linear`` layers and parameter-free activations.
    """
    h = x
    for layer in zip(*heads):
        first = layer[0]
        if not isinstance(first, nn.Linear):
            h = first(h)  # the same parameter-free activation in every head
            continue
        linears = cast(tuple[nn.Linear, ...], layer)
        if h.dim() == 2:  # a shared input: one matmul with the heads' weights side by side
            w = torch.cat([m.weight for m in linears])
            b = torch.cat([m.bias for m in linears])
            h = torch.addmm(b, h, w.T).view(h.shape[0], len(linears), -1).transpose(0, 1)
        else:
            w = torch.stack([m.weight for m in linears]).transpose(1, 2)
            b = torch.stack([m.bias for m in linears]).unsqueeze(1)
            h = torch.baddbmm(b, h, w)
    return h


def flat_obs_dim(space: spaces.Space) -> int:
    if not isinstance(space, spaces.Box):
        raise ValueError(
            f"observation space must be a Box (flatten Dict spaces first), got {space}"
        )
    return int(np.prod(space.shape))


class RecurrentActorCritic(nn.Module):
    """LSTM actor and ``n_critics`` critic heads with ``critic_out`` outputs each.

    Critic outputs are raw (normalised units): quantiles ``[.., Nq]``, atom logits ``[.., N]``
    or a scalar ``[.., 1]`` — their meaning is the critic's (:mod:`riskppo.nn.critics`).
    With ``risk_head`` one more head (index ``n_critics`` of every critic output) predicts
    ``critic_out`` quantiles of the *segment* return-to-go for the CVaR constraint (R-RISK-2); it
    reads the first critic's LSTM.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: PolicyConfig,
        *,
        n_critics: int,
        critic_out: int,
        risk_head: bool = False,
    ) -> None:
        super().__init__()
        obs_dim = flat_obs_dim(observation_space)
        hidden = cfg.lstm_hidden_size
        self._critics_read_actor = cfg.lstm_sharing == "all"
        self.memory = cfg.memory
        self.n_critics = n_critics
        self.has_risk_head = risk_head
        self.actor_lstm = MaskedLSTM(obs_dim, hidden, cfg.n_lstm_layers)
        n_vf_lstms = {"none": n_critics, "critics": 1, "all": 0}[cfg.lstm_sharing]
        self.critic_lstms = nn.ModuleList(
            MaskedLSTM(obs_dim, hidden, cfg.n_lstm_layers) for _ in range(n_vf_lstms)
        )
        self.actor_mlp, latent = mlp(hidden, cfg.net_arch, cfg.activation)
        self.action_head = ActionHead(
            action_space,
            latent,
            log_std_init=cfg.log_std_init,
            state_dependent_std=cfg.state_dependent_std,
        )
        self.critic_mlps = nn.ModuleList()
        self.critic_outs = nn.ModuleList()
        for _ in range(n_critics + int(risk_head)):
            body, latent_v = mlp(hidden, cfg.net_arch, cfg.activation)
            self.critic_mlps.append(body)
            self.critic_outs.append(nn.Linear(latent_v, critic_out))
        if cfg.ortho_init:
            self._ortho_init()

    def _ortho_init(self) -> None:
        # Orthogonal init as in SB3/CleanRL: sqrt(2) hidden, 0.01 policy output, 1 value output.
        for module in [*self.actor_mlp, *self.critic_mlps]:
            for layer in module.modules() if isinstance(module, nn.Sequential) else [module]:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, math.sqrt(2))
                    nn.init.zeros_(layer.bias)
        nn.init.orthogonal_(self.action_head.net.weight, 0.01)
        nn.init.zeros_(self.action_head.net.bias)
        for out in self.critic_outs:
            assert isinstance(out, nn.Linear)
            nn.init.orthogonal_(out.weight, 1.0)
            nn.init.zeros_(out.bias)

    @property
    def critic_lstm_list(self) -> list[MaskedLSTM]:
        return [cast(MaskedLSTM, m) for m in self.critic_lstms]

    @property
    def critic_out_layers(self) -> list[nn.Linear]:
        """The critics' linear output layers (rescaled by PopArt, R-ALG-8)."""
        return [cast(nn.Linear, m) for m in self.critic_outs[: self.n_critics]]

    def value_outputs(self, out: Tensor) -> Tensor:
        """The value critics' rows ``[C, ...]`` of a critic output ``[C (+1 risk head), ...]``."""
        return out[: self.n_critics]

    def risk_output(self, out: Tensor) -> Tensor:
        """The risk head's row ``[...]`` of a critic output ``[C + 1, ...]`` (row ``n_critics``)."""
        return out[self.n_critics]

    @property
    def risk_out_layer(self) -> nn.Linear:
        """Output layer of the risk head (segment return-to-go quantiles, R-RISK-2)."""
        if not self.has_risk_head:
            raise ValueError("this policy has no risk head (no cvar_limit configured)")
        return cast(nn.Linear, self.critic_outs[self.n_critics])

    # ---- state ---------------------------------------------------------------------------
    def initial_state(self, batch: int, device: torch.device | None = None) -> RecurrentState:
        vf = tuple(lstm.initial_state(batch, device) for lstm in self.critic_lstm_list)
        return RecurrentState(self.actor_lstm.initial_state(batch, device), vf)

    @overload
    def starts(self, episode_starts: Tensor) -> Tensor: ...
    @overload
    def starts(self, episode_starts: np.ndarray) -> np.ndarray: ...
    def starts(self, episode_starts: Tensor | np.ndarray) -> Tensor | np.ndarray:
        """The reset mask the LSTMs use: ``episode_starts`` itself, or all ones without
        ``memory`` (every step then starts from the zero state: a feed-forward network). Any
        shape; a NumPy array or a tensor, returned as the same kind."""
        if self.memory:
            return episode_starts
        if isinstance(episode_starts, np.ndarray):
            return np.ones_like(episode_starts)
        return torch.ones_like(episode_starts)

    # ---- actor ---------------------------------------------------------------------------
    def act(
        self,
        obs: Tensor,
        pi_state: LSTMState,
        episode_start: Tensor,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> ActStep:
        """One step for ``B`` envs: ``obs`` ``[B, D]``, ``episode_start`` ``[B]``."""
        return self.rollout_actor().act(
            obs, pi_state, episode_start, deterministic=deterministic, generator=generator
        )

    def rollout_actor(self) -> RolloutActor:
        """A snapshot of the actor for a step loop with fixed weights (a rollout)."""
        return RolloutActor(self)

    def actor_sequence(
        self, obs: Tensor, episode_starts: Tensor, pi_state: LSTMState
    ) -> tuple[ActionDistribution, Tensor, LSTMState]:
        """Replay ``[T, B, D]`` sequences; the distribution is over the flattened ``T*B`` steps."""
        latent, final, _ = self.actor_lstm(obs, pi_state, self.starts(episode_starts))
        dist = self.action_head(self.actor_mlp(latent.reshape(-1, latent.shape[-1])))
        return dist, latent, final

    # ---- critics -------------------------------------------------------------------------
    def critic_heads(self, latents: list[Tensor]) -> Tensor:
        """Apply each head to its LSTM output (``[..., H]``) → ``[C (+1 risk), ..., K]``."""
        if len(latents) == 1:
            x = latents[0]
            flat = x.reshape(-1, x.shape[-1])  # every head reads the same input
        else:
            if self.has_risk_head:
                latents = [*latents, latents[0]]
            x = latents[0]
            flat = torch.stack(latents).reshape(len(latents), -1, x.shape[-1])
        heads = [
            [*cast(nn.Sequential, body), out]
            for body, out in zip(self.critic_mlps, self.critic_outs)
        ]
        out = stacked_mlps(flat, heads)
        return out.reshape(len(heads), *x.shape[:-1], out.shape[-1])

    def critic_sequence(
        self,
        obs: Tensor,
        episode_starts: Tensor,
        state: RecurrentState,
        *,
        actor_latent: Tensor | None = None,
        capture: Iterable[int] = (),
    ) -> tuple[Tensor, tuple[LSTMState, ...], dict[int, tuple[LSTMState, ...]]]:
        """Critic outputs ``[C, T, B, K]`` for ``[T, B, D]`` sequences from ``state``.

        Also returns the final critic states and the critic states entering each step in
        ``capture`` (see :meth:`MaskedLSTM.forward`). When the critics read the actor's LSTM
        (``lstm_sharing='all'``) its output is ``actor_latent`` ``[T, B, H]`` (the stacked
        ``ActStep.critic_input`` of a rollout) or, if not given, computed from ``state.pi``.
        """
        episode_starts = self.starts(episode_starts)
        if not self.critic_lstms:
            if actor_latent is None:
                actor_latent, _, _ = self.actor_lstm(obs, state.pi, episode_starts)
            return self.critic_heads([actor_latent]), (), {t: () for t in capture}
        wanted = list(capture)
        results = run_lstms(self.critic_lstm_list, obs, state.vf, episode_starts, wanted)
        latents = [r[0] for r in results]
        captured_all = {t: tuple(r[2][t] for r in results) for t in wanted}
        return self.critic_heads(latents), tuple(r[1] for r in results), captured_all

    def evaluate_sequences(
        self, obs: Tensor, episode_starts: Tensor, state: RecurrentState
    ) -> tuple[ActionDistribution, Tensor]:
        """Training forward pass over ``[T, B, D]`` chunks: actor and critic LSTMs in one fused
        recurrence. Returns the action distribution over the ``T*B`` steps and critic outputs
        ``[C, T, B, K]``."""
        lstms = [self.actor_lstm, *self.critic_lstm_list]
        results = run_lstms(lstms, obs, [state.pi, *state.vf], self.starts(episode_starts))
        latent = results[0][0]
        dist = self.action_head(self.actor_mlp(latent.reshape(-1, latent.shape[-1])))
        critic_latents = [r[0] for r in results[1:]] or [latent]
        return dist, self.critic_heads(critic_latents)

    def critic_step(
        self,
        obs: Tensor,
        state: RecurrentState,
        episode_start: Tensor,
        actor_latent: Tensor | None = None,
    ) -> tuple[Tensor, tuple[LSTMState, ...]]:
        """One critic step from ``state``: ``obs`` ``[B, D]`` → outputs ``[C, B, K]`` and new
        critic states. ``actor_latent``: the step's ``ActStep.critic_input`` if at hand (else
        computed from ``state.pi`` when the critics read the actor's LSTM)."""
        episode_start = self.starts(episode_start)
        if not self.critic_lstms:
            if actor_latent is None:
                actor_latent, _ = self.actor_lstm.step(obs, state.pi, episode_start)
            return self.critic_heads([actor_latent]), ()
        results = run_lstms(
            self.critic_lstm_list,
            obs.unsqueeze(0),
            state.vf,
            episode_start.unsqueeze(0),
        )
        return self.critic_heads([r[0][0] for r in results]), tuple(r[1] for r in results)

    def lstm_modules(self) -> dict[str, MaskedLSTM]:
        """Named LSTMs, for per-module gradient norms and hidden-state stats (R-MON)."""
        named = {"actor": self.actor_lstm}
        for i, lstm in enumerate(self.critic_lstm_list):
            named[f"critic{i + 1}" if len(self.critic_lstms) > 1 else "critic"] = lstm
        return named
