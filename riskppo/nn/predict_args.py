"""Checks on the recurrent state and episode starts a user passes to
:meth:`~riskppo.agent.DistributionalPPO.predict` and
:meth:`~riskppo.agent.DistributionalPPO.value_distribution`.

A state carried over from another call must hold one entry per env of these observations, in
the model's dtype and device: the LSTM (in C or PyTorch) reads it row by row next to them. A
float64 state is refused rather than converted: every state this model returns is in its own
dtype, so another one was made by hand and may be meant for another model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from riskppo.nn.c_args import check
from riskppo.nn.policy import RecurrentActorCritic, RecurrentState
from riskppo.nn.raw_obs import normalize_observations, warn_if_raw

__all__ = ["check_state", "episode_starts", "given_obs", "obs_array"]

_HINT = "pass state=None to start fresh or the state returned for these observations"


def check_state(
    policy: RecurrentActorCritic, state: Any, batch: int, where: str, obs_desc: str
) -> RecurrentState:
    """``state`` if it fits ``policy`` and ``batch`` envs: a :class:`RecurrentState` whose
    ``h`` and ``c`` are ``[n_layers, batch, H]`` per LSTM, in the policy's dtype and device.
    Else one ``ValueError``: ``"{where}: ..."``, ``obs_desc`` saying how many envs the
    observations hold (e.g. ``"observation has 4 rows"``)."""
    lstms = [policy.actor_lstm, *policy.critic_lstm_list]
    if not isinstance(state, RecurrentState) or len(state.vf) != len(lstms) - 1:
        raise ValueError(f"{where}: state is not a state this model returned; {_HINT}")
    h = state.pi.h
    held = h.shape[1] if h.dim() == 3 else None
    if held != batch:
        raise ValueError(f"{where}: state holds {held} env(s) but {obs_desc}; {_HINT}")
    weight = next(policy.parameters())
    names = ["state.pi", *(f"state.vf[{i}]" for i in range(len(state.vf)))]
    try:
        for name, lstm_state, lstm in zip(names, [state.pi, *state.vf], lstms):
            shape = (lstm.n_layers, batch, lstm.hidden_size)
            for field, t in zip("hc", lstm_state):
                check(where, f"{name}.{field}", t, "[n_layers, B, H]", shape,
                      layout="any", dtype=weight.dtype, device=weight.device)  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"{exc}; {_HINT}") from None
    return state


def episode_starts(
    episode_start: Any, shape: tuple[int, ...], device: torch.device, where: str
) -> Tensor:
    """``episode_start`` as a float32 tensor of ``shape`` (``[B]`` or ``[T, B]``; None: zeros),
    or ``ValueError`` naming its shape."""
    if episode_start is None:
        return torch.zeros(shape, device=device)
    arr = np.asarray(episode_start, dtype=np.float32)
    if arr.size != int(np.prod(shape)):
        raise ValueError(
            f"{where}: episode_start has shape {list(arr.shape)}, expected {list(shape)} "
            "(one flag per env of the observations)"
        )
    return torch.as_tensor(arr, device=device).reshape(shape)


def obs_array(observation: Any, space: spaces.Space, max_lead: int) -> tuple[np.ndarray, int]:
    """``observation`` as float32 and its number of leading axes before ``space``'s shape: 0
    (one observation), 1 (a batch ``[B, ...]``), 2 (a sequence ``[T, B, ...]``), at most
    ``max_lead``; any other shape raises ``ValueError``."""
    obs = np.asarray(observation, dtype=np.float32)
    shape = tuple(space.shape or ())
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


def given_obs(model: Any, obs: np.ndarray, raw: bool) -> np.ndarray:
    """What the policy of ``model`` acts on for the observations ``obs`` ``[..., D]`` passed to
    ``predict``: with ``raw``, normalised by the model's statistics
    (:func:`~riskppo.nn.raw_obs.normalize_observations`); else ``obs`` as given, with one
    warning per model if they look raw to a normalising one (:mod:`riskppo.nn.raw_obs`)."""
    rms, clip = model.obs_statistics(), model.config.env.clip_obs
    if raw:
        return normalize_observations(obs, rms, clip)
    warn_if_raw(model, obs, rms, clip)
    return obs
