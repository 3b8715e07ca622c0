"""sb3-contrib's ``RecurrentPPO(policy, env, ...)`` line works with ``DistributionalPPO``: the
policy name ``"MlpLstmPolicy"`` first, positionally or as ``policy=``, and every earlier form
(``DistributionalPPO(env)``, ``env=``, ``policy={...}`` as the config section) still works.
RecurrentPPO's other policy names, a policy class and two envs are refused with one line
(``riskppo.agent.sb3_compat.policy_and_env``). Real envs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

from riskppo import DistributionalPPO
from riskppo.config import ConfigError
from riskppo.envs.teacher import base_env

TINY: dict[str, Any] = {"n_envs": 2, "n_steps": 16, "batch_size": 32, "lstm_hidden_size": 8}


def _venv() -> VecEnv:
    return make_vec_env("CartPole-v1", n_envs=2, seed=0)


def _id_first() -> tuple[DistributionalPPO, Any]:
    return DistributionalPPO("MlpLstmPolicy", "CartPole-v1", **TINY), "CartPole-v1"


def _venv_keyword() -> tuple[DistributionalPPO, Any]:
    venv = _venv()
    return DistributionalPPO("MlpLstmPolicy", env=venv, **TINY), venv


def _both_keywords() -> tuple[DistributionalPPO, Any]:
    venv = _venv()
    return DistributionalPPO(policy="MlpLstmPolicy", env=venv, **TINY), venv


def _no_env() -> tuple[DistributionalPPO, Any]:
    return DistributionalPPO("MlpLstmPolicy", **TINY), "CartPole-v1"  # the config's env.id


def _env_only() -> tuple[DistributionalPPO, Any]:
    return DistributionalPPO("Pendulum-v1", **TINY), "Pendulum-v1"


def _env_keyword() -> tuple[DistributionalPPO, Any]:
    venv = _venv()
    return DistributionalPPO(env=venv, **TINY), venv


FORMS: dict[str, Callable[[], tuple[DistributionalPPO, Any]]] = {
    "('MlpLstmPolicy', 'CartPole-v1')": _id_first,
    "('MlpLstmPolicy', env=venv)": _venv_keyword,
    "(policy='MlpLstmPolicy', env=venv)": _both_keywords,
    "('MlpLstmPolicy')": _no_env,
    "('Pendulum-v1')": _env_only,
    "(env=venv)": _env_keyword,
}


@pytest.mark.parametrize("form", FORMS)
def test_recurrent_ppos_constructor_forms_build_on_the_env_they_name(form: str) -> None:
    """Before: a TypeError (3 positional arguments; 'multiple values for argument env'), a
    pydantic message for ``policy=``, or "Environment `MlpLstmPolicy` doesn't exist"."""
    model, env = FORMS[form]()
    if isinstance(env, str):
        assert model.config.env.id == env and model.env_is_id
    else:
        assert base_env(model.env) is env and not model.env_is_id
    assert model.n_envs == 2 and model.config.policy.lstm_hidden_size == 8
    model.close()


def test_the_policy_name_form_trains() -> None:
    model = DistributionalPPO("MlpLstmPolicy", "CartPole-v1", seed=0, **TINY)
    model.learn(32)
    assert model.num_timesteps == 32
    model.close()


def test_policy_as_a_dict_is_still_the_config_section() -> None:
    tiny = {"n_envs": 1, "n_steps": 8, "batch_size": 8}
    model = DistributionalPPO("CartPole-v1", policy={"lstm_hidden_size": 4}, **tiny)
    named = DistributionalPPO(
        "MlpLstmPolicy", "CartPole-v1", policy={"lstm_hidden_size": 4}, **tiny
    )
    assert model.config.policy.lstm_hidden_size == named.config.policy.lstm_hidden_size == 4
    model.close()
    named.close()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("CnnLstmPolicy", "CartPole-v1"), "policy 'CnnLstmPolicy': .*no convolutional encoder"),
        (("MultiInputLstmPolicy", "CartPole-v1"), "policy 'MultiInputLstmPolicy': Dict obs.*"),
        (("MlpPolicy", "CartPole-v1"), r"policy 'MlpPolicy': .*recurrent.*memory=False"),
        (("MlpLstmPolicyy",), r"unknown policy name \(did you mean 'MlpLstmPolicy'\?\)"),
        ((torch.nn.Linear, "CartPole-v1"), "policy Linear: .*'MlpLstmPolicy'"),
        (("CartPole-v1", "Pendulum-v1"), r"two envs.*DistributionalPPO\('MlpLstmPolicy', env\)"),
    ],
)
def test_other_policies_are_refused_with_one_line_saying_what_to_write(
    args: tuple[Any, ...], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        DistributionalPPO(*args, **TINY)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "keywords", "expected"),
    [
        ((), {"policy": "MlpPolicy", "env": "CartPole-v1"}, "policy 'MlpPolicy': .*recurrent"),
        (("MlpLstmPolicy",), {"policy": "MlpLstmPolicy"}, "the policy is given twice"),
        (("MlpLstmPolicy", "CartPole-v1"), {"env": "CartPole-v1"}, "two envs"),
        (("MlpLstmPolicy", "CartPole-v1", 3e-4), {}, "at most 2 positional arguments"),
    ],
)
def test_keyword_and_positional_mixes_that_cannot_work_are_refused(
    args: tuple[Any, ...], keywords: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        DistributionalPPO(*args, **keywords, **TINY)
    assert "\n" not in str(info.value)
