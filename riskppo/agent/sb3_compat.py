"""Stable-Baselines3 habits in :class:`~riskppo.agent.DistributionalPPO` (see
``docs/sb3.md`` for the whole mapping).

What an SB3 user writes, and what riskppo does with it:

* ``DistributionalPPO(env, ...)`` or, as sb3-contrib's ``RecurrentPPO(policy, env, ...)``,
  ``DistributionalPPO("MlpLstmPolicy", env, ...)`` (:func:`policy_and_env`): ``env`` is an id
  (``"CartPole-v1"``, ``"module:Name-v1"``), a factory (``lambda: gym.make(...)``, called
  ``env.n_envs`` times), a ready ``VecEnv``, or one ``gym.Env`` instance — one environment, so
  only with ``n_envs=1`` (a single instance cannot be copied; pass the factory or the id for
  more). RecurrentPPO's other policy names are refused with what to write (:data:`POLICIES`).
* SB3 keywords (``learning_rate``, ``n_steps``, ``batch_size``, ``gamma``, ``ent_coef``,
  ``target_kl``, ``seed``, ``device``, ...) are riskppo config fields of the same name;
  :data:`KEYWORDS` names the ones that differ, :data:`UNSUPPORTED` the ones riskppo has no
  counterpart for (refused with what to do instead). ``policy_kwargs`` keys are ``policy.*``
  fields (:func:`policy_fields`); ``config`` is a :class:`~riskppo.config.Config`, a dict or the
  path of a YAML file.
* ``learn(callback=...)``: riskppo's ``callback(model, log)`` (after every update), an SB3
  ``BaseCallback`` or a list of either (SB3's in a ``CallbackList``), called like SB3 calls them
  (:class:`LearnCallbacks`). ``tb_log_name``/``log_interval``: as in SB3.
* ``tensorboard_log=DIR`` (without ``run_dir``): each ``learn`` that resets the step counter
  writes into a new ``DIR/<tb_log_name>_<N>`` (:func:`next_run_dir`), as SB3 does.
* :func:`config_and_env` / :func:`config_from_keywords`: the constructor's arguments and keywords
  merged into one validated :class:`~riskppo.config.Config`.
* ``save("x.zip")`` writes the checkpoint directory ``x`` (riskppo checkpoints are directories of
  safetensors + JSON, never zip/pickle); ``load("x.zip")`` reads it (:func:`checkpoint_dir`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from riskppo.algo.collect import RolloutHooks
from riskppo.algo.log import UpdateLog
from riskppo.config import Config, ConfigError, PolicyConfig, set_by_path

# SB3-style keyword → config path, where the name differs from the config field.
KEYWORDS: dict[str, str] = {
    "n_envs": "env.n_envs",
    "critic": "critic.kind",
    "twin_critics": "critic.twin",
    "tensorboard_log": "monitor.tensorboard_log",
    "verbose": "monitor.verbose",
    "optimizer": "optim.optimizer",
    "normalize_obs": "env.normalize_obs",
    "sa_kappa": "adversarial.kappa",
    "sa_eps": "adversarial.eps",
}

# SB3 keywords with no riskppo counterpart → what to do instead.
UNSUPPORTED: dict[str, str] = {
    "use_sde": "generalized state-dependent exploration is not implemented; "
    "policy_kwargs=dict(state_dependent_std=True) learns a state-dependent std instead",
    "sde_sample_freq": "generalized state-dependent exploration is not implemented",
    "stats_window_size": "rollout/ep_rew_mean averages the episodes finished in each rollout",
    "rollout_buffer_class": "the recurrent rollout buffer is riskppo's own; drop it",
    "rollout_buffer_kwargs": "the recurrent rollout buffer is riskppo's own; drop it",
    "_init_setup_model": "the model is always built in the constructor; drop it",
}

# SB3's and sb3-contrib's policy names → ``None`` (riskppo's recurrent actor-critic) or why
# riskppo refuses the name and what to write instead.
POLICIES: dict[str, str | None] = {
    "MlpLstmPolicy": None,
    "CnnLstmPolicy": "riskppo's policy has no convolutional encoder; 'MlpLstmPolicy' takes any "
    "Box observation (flattened)",
    "MultiInputLstmPolicy": "Dict observations are not supported; flatten them "
    "(gymnasium.wrappers.FlattenObservation) and pass 'MlpLstmPolicy'",
    "MlpPolicy": "riskppo's policy is recurrent, sb3-contrib RecurrentPPO's 'MlpLstmPolicy': pass "
    "that (policy_kwargs=dict(memory=False) makes its actor and critics feed-forward)",
    "CnnPolicy": "riskppo's policy is recurrent and has no convolutional encoder; pass "
    "'MlpLstmPolicy' (it takes any Box observation, flattened)",
    "MultiInputPolicy": "riskppo's policy is recurrent and takes no Dict observations; flatten "
    "them (gymnasium.wrappers.FlattenObservation) and pass 'MlpLstmPolicy'",
}
_USAGE = "write DistributionalPPO('MlpLstmPolicy', env) or DistributionalPPO(env)"


def policy_and_env(args: tuple[Any, ...], env: Any, policy: Any) -> tuple[Any, Any]:
    """``(env, policy section)`` of ``DistributionalPPO(*args, env=env, policy=policy)``, SB3's
    way and riskppo's: ``("MlpLstmPolicy", env)``, ``("MlpLstmPolicy", env=...)``,
    ``(policy="MlpLstmPolicy", env=...)`` and ``(env)`` (one positional argument is the env
    unless it names a policy). ``policy={...}`` (a dict or :class:`PolicyConfig`) is the config's
    ``policy`` section. A refused or unknown policy name, a policy class, two envs or more than
    two positional arguments raise :class:`ConfigError` (one line saying what to write)."""
    if len(args) > 2:
        raise ConfigError(
            f"DistributionalPPO takes at most 2 positional arguments (policy, env), got "
            f"{len(args)}; everything after the env is a keyword: {_USAGE}"
        )
    section = policy if isinstance(policy, dict | PolicyConfig) else None
    names = [] if policy is None or section is not None else [policy]
    given = list(args)
    if len(given) == 2 or (given and _names_a_policy(given[0])):
        names.insert(0, given.pop(0))
    envs = [e for e in (*given, env) if e is not None]
    if len(names) > 1:
        raise ConfigError(f"DistributionalPPO: the policy is given twice; {_USAGE}")
    if names and not _names_a_policy(names[0]):
        envs.insert(0, names[0])  # DistributionalPPO(env, env2)
    elif names:
        check_policy(names[0])
    if len(envs) > 1:
        raise ConfigError(
            f"DistributionalPPO({', '.join(map(_short, envs))}): two envs; the first argument is "
            f"the policy name 'MlpLstmPolicy' (as in RecurrentPPO) or the env: {_USAGE}"
        )
    return (envs[0] if envs else None), section


def check_policy(policy: Any) -> None:
    """Accept ``"MlpLstmPolicy"``; refuse any other name or a policy class with one line."""
    if isinstance(policy, type):
        raise ConfigError(
            f"policy {policy.__name__}: riskppo's policy is its own recurrent actor-critic, named "
            "'MlpLstmPolicy' (policy_kwargs=dict(...) sets its fields); " + _USAGE
        )
    why = POLICIES.get(policy, "")
    if why is None:
        return
    if not why:
        hint = did_you_mean(policy, [*POLICIES])
        why = f"unknown policy name{hint}; DistributionalPPO's policy is 'MlpLstmPolicy'"
    raise ConfigError(f"policy {policy!r}: {why}")


def _names_a_policy(value: Any) -> bool:
    """A policy name (:func:`_is_policy_name`) or a policy class (a ``torch.nn.Module``)."""
    return _is_policy_name(value) or (
        isinstance(value, type) and issubclass(value, torch.nn.Module)
    )


def _is_policy_name(value: Any) -> bool:
    """Whether ``value`` names a policy rather than an env: one of :data:`POLICIES` or a word
    with ``polic`` in it (``MlpLstmPolicyy``, ``lstmpolicy``) that is no registered env id (env
    ids have a version, ``-v1``)."""
    if not isinstance(value, str):
        return False
    return value in POLICIES or bool(
        re.fullmatch(r"\w*polic\w*", value, re.IGNORECASE) and value not in gym.registry
    )


def _short(value: Any) -> str:
    """An id as written, anything else by its type (a VecEnv's repr is no help)."""
    return repr(value) if isinstance(value, str) else type(value).__name__


# torch.nn activation classes (SB3's ``activation_fn``) → ``policy.activation``.
_ACTIVATIONS = {torch.nn.Tanh: "tanh", torch.nn.ReLU: "relu", torch.nn.GELU: "gelu"}


def policy_fields(policy_kwargs: Any) -> dict[str, Any]:
    """SB3's ``policy_kwargs`` as ``policy.*`` config fields (``activation_fn=torch.nn.ReLU`` →
    ``activation: relu``); anything else raises :class:`ConfigError` naming the accepted keys."""
    if not isinstance(policy_kwargs, dict):
        raise ConfigError(f"policy_kwargs must be a dict, got {type(policy_kwargs).__name__}")
    fields: dict[str, Any] = {}
    allowed = sorted([*PolicyConfig.model_fields, "activation_fn"])
    for key, value in policy_kwargs.items():
        if key == "activation_fn":
            if value not in _ACTIVATIONS:
                raise ConfigError(
                    f"policy_kwargs activation_fn={value!r}: riskppo's policy takes "
                    f"{', '.join(c.__name__ for c in _ACTIVATIONS)} (torch.nn)"
                )
            key, value = "activation", _ACTIVATIONS[value]
        elif key == "net_arch" and isinstance(value, dict):
            raise ConfigError(
                "policy_kwargs net_arch: the actor and the critics share one list of widths "
                "after their LSTMs in riskppo; pass a list, e.g. net_arch=[64]"
            )
        elif key not in PolicyConfig.model_fields:
            raise ConfigError(
                f"policy_kwargs: unknown key {key!r}{did_you_mean(key, allowed)}; riskppo's "
                f"policy takes {', '.join(allowed)}"
            )
        fields[key] = value
    return fields


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_keyword(key: str, names: Sequence[str]) -> ConfigError:
    """The error for a constructor keyword that names no config field."""
    if key in UNSUPPORTED:
        return ConfigError(f"keyword argument {key!r} (SB3) is not supported: {UNSUPPORTED[key]}")
    return ConfigError(
        f"unknown keyword argument {key!r}{did_you_mean(key, names)}; keywords are config "
        "fields (learning_rate, n_steps, lstm_hidden_size, ...) or SB3's names (docs/sb3.md); "
        "policy_kwargs=dict(...) sets policy.*, config={'section': {...}} anything"
    )


def set_env_mismatch(
    venv: Any, observation_space: gym.Space[Any], action_space: gym.Space[Any], n_envs: int
) -> str | None:
    """Why ``set_env`` cannot take ``venv`` for a model of these spaces and number of envs, as
    one line naming what differs first; ``None`` when it fits."""
    found = [
        _space_difference("observation", venv.observation_space, observation_space),
        _space_difference("action", venv.action_space, action_space),
    ]
    if venv.num_envs != n_envs:
        found.append(
            f"the new env has {venv.num_envs} envs, the model was built for {n_envs} (make it "
            f"with n_envs={n_envs})"
        )
    problems = [f for f in found if f]
    if not problems:
        return None
    return (
        f"set_env: {'; '.join(problems)}; a model's spaces and number of envs are fixed when it "
        "is built (for another env, build a new model)"
    )


def _space_difference(kind: str, new: gym.Space[Any], old: gym.Space[Any]) -> str:
    """What differs between the new env's space and the model's (``""``: nothing), shortest
    first: the kind of space, the shape, the dtype, else the whole spaces."""
    if new == old:
        return ""
    what = f"the new env's {kind} space"
    if type(new) is not type(old):
        return f"{what} is {new}, the model's {old}"
    if new.shape != old.shape:
        return f"{what} has shape {new.shape}, the model's {old.shape}"
    if new.dtype != old.dtype:
        return f"{what} has dtype {new.dtype}, the model's {old.dtype}"
    return f"{what} is {new}, the model's {old}"


def checkpoint_dir(path: str | Path) -> Path:
    """The checkpoint directory for an SB3-style ``x.zip`` path: ``x`` (riskppo checkpoints are
    directories). Any other path is used as it is."""
    path = Path(path)
    return path.with_suffix("") if path.suffix == ".zip" else path


def next_run_dir(log_dir: str | Path, name: str, *, continue_last: bool = False) -> Path:
    """``log_dir/<name>_<N>`` with ``N`` one more than the largest existing (SB3's numbering);
    with ``continue_last``, the largest existing one (or ``<name>_1``)."""
    pattern = re.compile(rf"{re.escape(name)}_(\d+)")
    root = Path(log_dir)
    taken = [
        int(m[1])
        for p in (root.iterdir() if root.is_dir() else [])
        if (m := pattern.fullmatch(p.name))
    ]
    last = max(taken, default=0)
    return root / f"{name}_{max(last, 1) if continue_last else last + 1}"


AfterUpdate = Callable[[Any, UpdateLog], Any]


class LearnCallbacks:
    """What ``learn(callback=...)`` got, sorted: riskppo's ``callback(model, log)`` callables
    (after every update; ``False`` stops) and SB3 ``BaseCallback`` objects (SB3's hooks:
    ``_on_training_start``, ``_on_rollout_start``, ``_on_step`` after every vec-env step —
    ``False`` stops at once, the unfinished rollout is dropped —, ``_on_rollout_end`` and
    ``_on_training_end``; ``self.locals`` holds the step's ``new_obs``, ``rewards``, ``dones``,
    ``infos``, ``actions``). Anything else raises ``TypeError`` before training starts."""

    def __init__(self, callback: Any) -> None:
        items = list(callback) if isinstance(callback, list | tuple) else [callback]
        self.after: list[AfterUpdate] = []
        sb3: list[Any] = []
        for item in items:
            if item is None:
                continue
            if hasattr(item, "init_callback") and hasattr(item, "on_step"):
                sb3.append(item)
            elif callable(item):
                self.after.append(item)
            else:
                raise TypeError(
                    f"callback: {type(item).__name__} is neither a function callback(model, log) "
                    "nor a stable_baselines3 BaseCallback"
                )
        self.sb3: Any = None
        if len(sb3) == 1:
            self.sb3 = sb3[0]
        elif sb3:
            from stable_baselines3.common.callbacks import CallbackList

            self.sb3 = CallbackList(sb3)
        self.hooks: RolloutHooks | None = None

    def start(self, model: Any, locals_: dict[str, Any]) -> None:
        """SB3's ``init_callback`` and ``on_training_start``."""
        if self.sb3 is not None:
            self.sb3.init_callback(model)
            self.sb3.on_training_start(locals_, {})
            self.hooks = _SB3Hooks(self.sb3, model)

    def after_update(self, model: Any, log: UpdateLog) -> bool:
        """riskppo's callbacks after an update; ``False``: one of them asked to stop."""
        return all([cb(model, log) is not False for cb in self.after])

    def end(self) -> None:
        if self.sb3 is not None:
            self.sb3.on_training_end()


class _SB3Hooks:
    """An SB3 callback as :class:`~riskppo.algo.collect.RolloutHooks`; while a rollout is under
    way the model's ``num_timesteps`` counts its steps (``rollout_steps``), as SB3's does."""

    def __init__(self, callback: Any, model: Any) -> None:
        self.callback, self.model = callback, model

    def rollout_start(self) -> None:
        self.model.rollout_steps = 0
        self.callback.on_rollout_start()

    def step(self, data: dict[str, Any]) -> bool:
        self.model.rollout_steps = data["n_steps"] * self.model.n_envs
        self.callback.update_locals(data)
        with torch.inference_mode(False):  # the callback may use autograd (SB3 has no mode)
            return bool(self.callback.on_step())

    def rollout_end(self) -> None:
        with torch.inference_mode(False):
            self.callback.on_rollout_end()


# ---- constructor keywords → config -------------------------------------------------------------
def config_and_env(
    args: tuple[Any, ...],
    env: Any,
    config: Config | dict[str, Any] | str | Path | None,
    kwargs: dict[str, Any],
    default_env: bool,
) -> tuple[Config, Any]:
    """The model's config and env from RecurrentPPO-style ``(policy, env)`` arguments and
    keywords (``kwargs`` loses its ``policy``); ``default_env``: no env given means the
    config's ``env.id``, and an env id also sets it."""
    env, section = policy_and_env(args, env, kwargs.pop("policy", None))
    if section is not None:  # policy={...}: the config's policy section
        kwargs["policy"] = section
    cfg = config_from_keywords(config, **kwargs)
    if env is None and default_env:
        env = cfg.env.id
    if isinstance(env, str):
        cfg = config_from_keywords(cfg, id=env)
    return cfg, env


def config_from_keywords(
    config: Config | dict[str, Any] | str | Path | None, **kwargs: Any
) -> Config:
    """Merge SB3-style keyword arguments into a config (validated, ``ConfigError`` on misuse).

    ``config`` is a :class:`Config`, a nested dict or the path of a YAML file. A keyword is a
    config field (``learning_rate`` → ``ppo.learning_rate``; it must name one field), an SB3 name
    of :data:`KEYWORDS`, or ``policy_kwargs`` (``policy.*`` fields).
    """
    if isinstance(config, str | Path):
        config = Config.from_yaml(config)
    base = config.to_dict() if isinstance(config, Config) else dict(config or {})
    for key, value in policy_fields(kwargs.pop("policy_kwargs", {})).items():
        set_by_path(base, f"policy.{key}", value)
    for key, value in kwargs.items():
        set_by_path(base, _keyword_path(key), value)
    return Config.build(base)


def _keyword_path(key: str) -> str:
    """The config path a constructor keyword sets (``ConfigError`` if none or ambiguous)."""
    if key in KEYWORDS:
        return KEYWORDS[key]
    if key in Config.model_fields:
        return key
    sections = {name: f.annotation for name, f in Config.model_fields.items()}
    owners = [
        s
        for s, ann in sections.items()
        if isinstance(ann, type) and key in getattr(ann, "model_fields", {})
    ]
    if len(owners) > 1:
        raise ConfigError(
            f"keyword argument {key!r} is ambiguous ({owners}): pass config={{section: {{...}}}}"
        )
    if not owners:
        names = [*KEYWORDS, *Config.model_fields]
        for ann in sections.values():
            names += list(getattr(ann, "model_fields", {}))
        raise unknown_keyword(key, names)
    return f"{owners[0]}.{key}"
