"""Gymnasium's vector API (``gymnasium.vector.VectorEnv``) as a Stable-Baselines3 ``VecEnv``.

riskppo steps envs with SB3's semantics: an env whose episode ends is reset in the same step;
the returned observation is the new episode's first, the info of the last step carries
``terminal_observation`` and ``TimeLimit.truncated``. Gymnasium vector envs autoreset in one of
three modes (``metadata["autoreset_mode"]``, https://farama.org/Vector-Autoreset-Mode):

* ``SAME_STEP``: the env already reset; the final observation and info are in
  ``infos["final_obs"]`` / ``infos["final_info"]`` and the step's infos are the reset's;
* ``NEXT_STEP`` (Gymnasium's default): the final observation is returned, and the *next* step
  would reset the env instead of stepping it (that step's action ignored, reward 0);
* ``DISABLED``: nothing is reset.

:class:`GymVectorVecEnv` turns all three into SB3's: with ``NEXT_STEP`` and ``DISABLED`` the
ended envs are reset at once with ``reset(options={"reset_mask": done})`` (Gymnasium's way to
reset some envs; ``SyncVectorEnv`` and ``AsyncVectorEnv`` support it), so no step is lost and no
action ignored. A vector env that cannot reset single envs can only be used in ``SAME_STEP``
mode (:func:`resets_single_envs`). Infos get ``episode`` as SB3's ``Monitor`` writes it
(:mod:`riskppo.envs.vec.infos`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env import VecEnv

from riskppo.envs.vec.infos import EpisodeTally, env_indices

__all__ = ["GymVectorVecEnv", "autoreset_mode", "resets_single_envs", "unbatch_infos"]


def autoreset_mode(vec: VectorEnv) -> AutoresetMode:
    """The vector env's autoreset mode (``NEXT_STEP`` where it does not say: Gymnasium 1.0)."""
    return AutoresetMode(vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))


def unbatch_infos(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's batched info dict (a value array and a ``_key`` mask per key, nested dicts
    likewise) → ``n`` per-env info dicts with the keys each env reported."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if isinstance(value, dict):
            per_env = unbatch_infos(value, n)
            present = mask if mask is not None else [bool(d) for d in per_env]
            for i in range(n):
                if present[i]:
                    out[i][key] = per_env[i]
            continue
        for i in range(n):
            if mask is None or mask[i]:
                item = value[i]
                out[i][key] = item.item() if isinstance(item, np.generic) else item
    return out


def resets_single_envs(vec: VectorEnv) -> bool:
    """Whether ``vec`` can give SB3's semantics: it resets in the same step, or
    ``reset(options={"reset_mask": ...})`` resets only the masked envs (tried: the others'
    observations after one step must be left as they were). Leaves ``vec`` needing a reset."""
    if autoreset_mode(vec) == AutoresetMode.SAME_STEP or vec.num_envs == 1:
        return True
    vec.reset(seed=0)
    stepped, *_ = vec.step(vec.action_space.sample())
    mask = np.zeros(vec.num_envs, dtype=bool)
    mask[0] = True
    try:
        after, _ = vec.reset(options={"reset_mask": mask})
    except (TypeError, ValueError, KeyError, AssertionError):
        return False
    return bool(np.array_equal(np.asarray(stepped)[1:], np.asarray(after)[1:]))


class GymVectorVecEnv(VecEnv):
    """A Gymnasium ``VectorEnv`` stepped with SB3's semantics (see the module docstring).

    ``seed(s)`` then ``reset()`` resets with ``seed=s`` (env ``i`` of a ``SyncVectorEnv`` gets
    ``s + i``, as SB3's vec envs seed theirs).
    """

    def __init__(self, vec: VectorEnv) -> None:
        self.vec = vec  # before VecEnv.__init__, which reads render_mode through get_attr
        super().__init__(vec.num_envs, vec.single_observation_space, vec.single_action_space)
        self.mode = autoreset_mode(vec)
        self.tally = EpisodeTally(vec.num_envs)
        self._actions: np.ndarray | None = None

    def reset(self) -> Any:
        seed = self._seeds[0]
        options = self._options[0] or None
        obs, infos = self.vec.reset(seed=seed, options=options)
        self.reset_infos = unbatch_infos(infos, self.num_envs)
        for i in range(self.num_envs):
            self.tally.reset(i)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, term, trunc, batched = self.vec.step(self._actions)
        n = self.num_envs
        term, trunc = np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool)
        rewards = np.asarray(rewards, dtype=np.float64)
        infos = unbatch_infos(batched, n)
        done = term | trunc
        if self.mode == AutoresetMode.SAME_STEP:
            final_infos = unbatch_infos(batched.get("final_info", {}), n)
            for i in np.flatnonzero(done).tolist():
                # the step's infos are the reset's, with the final observation and info
                reset_info = infos[i]
                reset_info.pop("final_obs", None)
                reset_info.pop("final_info", None)
                self.reset_infos[i] = reset_info
                infos[i] = final_infos[i]
                infos[i]["terminal_observation"] = batched["final_obs"][i]
        elif done.any():
            obs = np.array(obs)  # the ended envs' rows are replaced
            for i in np.flatnonzero(done).tolist():
                infos[i]["terminal_observation"] = obs[i].copy()
            new_obs, reset_batched = self.vec.reset(options={"reset_mask": done})
            obs[done] = np.asarray(new_obs)[done]
            reset_infos = unbatch_infos(reset_batched, n)
            for i in np.flatnonzero(done).tolist():
                self.reset_infos[i] = reset_infos[i]
        self.tally.record(rewards.tolist(), term.tolist(), trunc.tolist(), infos)
        return obs, rewards.astype(np.float32), done, infos

    def close(self) -> None:
        self.vec.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if not hasattr(self.vec, "get_attr"):  # a native vector env: one object for all envs
            value = getattr(self.vec, attr_name)
            return [value for _ in env_indices(indices, self.num_envs)]
        values = self._api.get_attr(attr_name)
        return [values[i] for i in env_indices(indices, self.num_envs)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        self._all_envs(indices, f"set_attr({attr_name!r})")
        self._api.set_attr(attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        self._all_envs(indices, f"env_method({method_name!r})")
        return list(self._api.call(method_name, *method_args, **method_kwargs))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in env_indices(indices, self.num_envs)]

    def _all_envs(self, indices: Any, what: str) -> None:
        """Gymnasium's ``set_attr`` and ``call`` act on every env: refuse fewer."""
        if env_indices(indices, self.num_envs) != list(range(self.num_envs)):
            raise NotImplementedError(
                f"{what} with indices={indices!r}: a Gymnasium vector env sets attributes and "
                "calls methods on all of its envs at once; leave indices out"
            )

    @property
    def _api(self) -> Any:
        """The vector env's per-env attribute API (``get_attr``, ``set_attr``, ``call``: on
        ``SyncVectorEnv`` and ``AsyncVectorEnv``, not on the ``VectorEnv`` base class)."""
        return self.vec
