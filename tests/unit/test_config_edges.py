"""Config edge cases (issue 16, item 6): finite floats, strict numbers, bounded YAML, memory."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from riskppo.config import (
    Config,
    ConfigError,
    apply_overrides,
    check_rollout_memory,
)
from riskppo.config_limits import rollout_bytes

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


def _bomb(path: Path) -> int:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghi"
    for prev, cur in itertools.pairwise(names):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return len(text.encode())


def test_yaml_alias_bomb_rejected_fast_with_bounded_memory(tmp_path):
    path = tmp_path / "bomb.yaml"
    assert _bomb(path) < 600  # 9^9 ~ 387 million strings once expanded
    # A child process with a 1 GiB address-space cap and a 30 s timeout: before the guard this
    # took ~20 s and then died with MemoryError.
    code = textwrap.dedent(
        f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from riskppo.config import Config, ConfigError
        t = time.perf_counter()
        try:
            Config.from_yaml({str(path)!r})
        except ConfigError as e:
            print("REFUSED", time.perf_counter() - t, e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("REFUSED"), out.stdout + out.stderr[-2000:]
    seconds = float(out.stdout.split()[1])
    assert seconds < 2.0, out.stdout
    assert "alias bomb" in out.stdout and str(path) in out.stdout


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
