"""Config edge cases: finite floats, strict numbers, bounded YAML, memory."""

from __future__ import annotations

import re
import textwrap

import pytest

from riskppo.config import (
    Config,
    ConfigError,
    apply_overrides,
    check_rollout_memory,
)
from riskppo.config.limits import rollout_bytes

NONFINITE_FIELDS = [
    "critic.v_min",
    "critic.v_max",
    "risk.cvar_limit",
    "risk.lambda_init",
    "policy.log_std_init",
    "ppo.learning_rate",
    "monitor.entropy_continuous_per_dim",
    "pbt.selection_cvar_limit",
]


@pytest.mark.parametrize("field", NONFINITE_FIELDS)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nonfinite_floats_rejected_from_yaml_file(tmp_path, field, value):
    section, name = field.split(".")
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {name}: {value}\n")
    with pytest.raises(ConfigError) as ei:
        Config.from_yaml(path)
    msg = str(ei.value)
    assert str(path) in msg and field in msg and "finite" in msg, msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        apply_overrides(Config(), [f"{field}={value}"])


@pytest.mark.parametrize("field", ["env.n_envs", "ppo.n_steps", "critic.v_min", "seed"])
def test_booleans_are_not_numbers(tmp_path, field):
    path = tmp_path / "c.yaml"
    if "." in field:
        section, name = field.split(".")
        path.write_text(f"{section}:\n  {name}: true\n")
    else:
        path.write_text(f"{field}: true\n")
    with pytest.raises(ConfigError, match=re.escape(field) + ": expected a number"):
        Config.from_yaml(path)


def test_bool_fields_still_take_booleans():
    cfg = apply_overrides(Config(), ["data.sort=true", "critic.twin=false"])
    assert cfg.data.sort is True and cfg.critic.twin is False


def test_deeply_nested_yaml_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("seed: " + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(ConfigError, match="nested"):
        Config.from_yaml(path)


def test_oversized_config_file_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="bytes; at most"):
        Config.from_yaml(path)


def test_config_path_that_is_a_directory(tmp_path):
    path = tmp_path / "c.yaml"
    path.mkdir()
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.from_yaml(path)


def test_rollout_that_cannot_fit_is_a_config_error():
    cfg = apply_overrides(Config(), ["ppo.n_steps=100000000", "ppo.batch_size=128"])
    with pytest.raises(ConfigError, match=r"ppo\.n_steps=100000000 x env\.n_envs=8") as ei:
        check_rollout_memory(cfg, obs_size=64)
    assert "\n" not in str(ei.value)
    # the default fits, also against a small machine
    check_rollout_memory(Config(), obs_size=64, total_bytes=1 << 30)
    need = rollout_bytes(128, 8, 64)
    with pytest.raises(ConfigError, match="GiB"):
        check_rollout_memory(Config(), obs_size=64, total_bytes=2 * need - 2)


# Values the validator used to accept and that then crashed (or allocated gigabytes) when the
# model was built; each is refused up front naming the field.
UNBUILDABLE = [
    ("seed=10000000000000000000000", "seed: Input should be less than or equal to"),
    ("seed=1.0e+22", "seed: "),
    ("num_threads=1000000", "num_threads: Input should be less than or equal to 1024"),
    ("num_threads=1.0e+22", "num_threads: "),
    ("policy.net_arch=[-5]", "policy.net_arch: every width must be ≥ 1 (got [-5])"),
    ("policy.net_arch=[64, 0]", "policy.net_arch: every width must be ≥ 1 (got [64, 0])"),
    ("policy.lstm_hidden_size=50000", "policy.lstm_hidden_size=50000"),
    ("policy.n_lstm_layers=100000", "policy.n_lstm_layers=100000"),
    ("policy.net_arch=[1000000, 1000000]", "policy.net_arch=[1000000, 1000000]"),
    ("critic.n_quantiles=100000000", "critic.n_quantiles: Input should be less than or equal"),
    ("critic.n_atoms=100000000", "critic.n_atoms: Input should be less than or equal"),
    ("policy.log_std_init=1.0e+308", "policy.log_std_init: Input should be less than or equal"),
    ("critic.v_min=-1.0e+308", "critic.v_min: Input should be greater than or equal"),
    ("critic.v_max=1.0e+308", "critic.v_max: Input should be less than or equal"),
    ("risk.cvar_window=10000000000000000000000", "risk.cvar_window: Input should be less"),
    ("risk.cvar_window=1.0e+22", "risk.cvar_window: "),
    ("risk.cvar_horizon=10000000000000000000000", "risk.cvar_horizon: Input should be less"),
    ("env.kwargs.=1", "--set 'env.kwargs.': every part of a dotted key needs a name"),
    ("env.kwargs={'': 1}", "env.kwargs: every key must be a keyword argument name"),
    ("seed=" + "9" * 5000, "--set 'seed': an integer of more than 4300 digits"),
    ("policy={lstm_hidden_size: 8, lstm_hidden_size: 9}", "duplicate key 'lstm_hidden_size'"),
]


@pytest.mark.parametrize(("item", "message"), UNBUILDABLE, ids=lambda v: str(v)[:40])
def test_unbuildable_values_are_one_line_config_errors(item, message):
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), [item])
    text = str(info.value)
    assert message in text and "\n" not in text and len(text) < 600, text


def test_a_network_too_large_to_build_names_its_fields():
    with pytest.raises(ConfigError, match=r"policy\.lstm_hidden_size=50000.*parameters"):
        Config.build({"policy": {"lstm_hidden_size": 50000}})
    big = Config.build({"policy": {"lstm_hidden_size": 1024, "net_arch": [256, 256]}})
    assert big.policy.lstm_hidden_size == 1024  # large but buildable networks stay allowed


def test_parameter_estimate_matches_the_built_policy():
    """The estimate the check uses is the model's own count for one observation value."""
    import gymnasium as gym

    from riskppo.nn.policy import RecurrentActorCritic

    policy = {"lstm_hidden_size": 12, "n_lstm_layers": 2, "net_arch": [7]}
    cfg = Config.build({"policy": policy, "critic": {"n_quantiles": 5}})
    obs, act = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(4)
    net = RecurrentActorCritic(obs, act, cfg.policy, n_critics=2, critic_out=5)
    assert cfg.parameter_count(3, 4) == sum(p.numel() for p in net.parameters())


def test_duplicate_yaml_keys_are_refused_with_their_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\nppo:\n  n_steps: 16\n  n_steps: 32\n")
    with pytest.raises(ConfigError) as info:
        Config.from_yaml(path)
    assert str(info.value) == f"{path}: duplicate key 'n_steps' on line 4 (first on line 3)"
    merged = textwrap.dedent("""\
        ppo:
          <<: {n_steps: 16, batch_size: 32}
          n_steps: 32
        """)
    path.write_text(merged)  # keys brought in by a merge may still be overridden
    assert Config.from_yaml(path).ppo.n_steps == 32


def test_binary_and_huge_integer_yaml_are_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ConfigError, match=r"c\.yaml: not UTF-8 text \(byte 0x80 at offset 0\)"):
        Config.from_yaml(path)
    path.write_text("seed: " + "7" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: an integer of more than 4300 digits$"):
        Config.from_yaml(path)


def test_a_huge_value_is_quoted_short():
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), ["seed=" + "x" * 1_000_000])
    assert len(str(info.value)) < 300 and "xxx…" in str(info.value)


def test_set_takes_none_and_e_notation_as_a_command_line_user_means_them():
    """``None``/``none`` are null and ``1e5``/``3e-4`` numbers (YAML 1.1 reads all of them as
    strings); an integral e-number fills an int, a fractional one is refused by name."""
    from riskppo.config import Config, ConfigError, apply_overrides

    cfg = apply_overrides(
        Config(),
        ["total_timesteps=1e5", "ppo.learning_rate=3e-4", "env.kwargs.episode_length=None",
         "env.kwargs.vol_span=none", "env.kwargs.name=1e5x"],
    )  # fmt: skip
    assert cfg.total_timesteps == 100_000 and isinstance(cfg.total_timesteps, int)
    assert cfg.ppo.learning_rate == 3e-4
    assert cfg.env.kwargs["episode_length"] is None and cfg.env.kwargs["vol_span"] is None
    assert cfg.env.kwargs["name"] == "1e5x"
    with pytest.raises(ConfigError, match="total_timesteps"):
        apply_overrides(Config(), ["total_timesteps=1.5e0"])
