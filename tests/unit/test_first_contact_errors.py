"""Mistakes a new user makes get one line naming the key and what to do: a mistyped config key or
``env.kwargs`` key ("did you mean ..."), a CVaR limit in percent or with the wrong sign, behaviour
cloning switched on with no weight, a demonstration file named ``.csv``, a missing or malformed
data file (answered before torch loads); ``riskppo bench`` runs in the user's working
directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from riskppo.cli import bench as cli_bench
from riskppo.cli.main import load_config, main
from riskppo.config import Config, ConfigError, apply_overrides
from riskppo.envs.kwargs_check import check_env_kwargs
from riskppo.envs.registration import register_envs


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("ppo.learnin_rate", "ppo.learnin_rate: unknown key; did you mean ppo.learning_rate?"),
        ("sed", "sed: unknown key; did you mean seed?"),
        ("pp.gamma", "pp: unknown key; did you mean ppo?"),
        ("risk.zzz", "risk.zzz: unknown key; valid keys of risk: cvar_alpha, "),
        # the right name in the wrong section, or a close spelling of another section's key
        ("learning_rate", "learning_rate: unknown key; did you mean ppo.learning_rate?"),
        ("risk.learning_rate", "risk.learning_rate: unknown key; did you mean ppo.learning_rate?"),
        ("learnig_rate", "learnig_rate: unknown key; did you mean ppo.learning_rate?"),
        ("n_envs", "n_envs: unknown key; did you mean env.n_envs?"),
    ],
)
def test_a_mistyped_key_suggests_the_valid_one(key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as ei:
        apply_overrides(Config(), [f"{key}=1"])
    assert hint in str(ei.value)


def test_a_top_level_set_of_a_section_key_names_the_section(capsys) -> None:
    line = one_line(["train", "--set", "learning_rate=1e-4"], capsys)
    assert line == (
        "riskppo: configuration error: invalid configuration: learning_rate: unknown key; "
        "did you mean ppo.learning_rate? (got 0.0001)"
    )


def test_a_mistyped_yaml_key_suggests_the_valid_one(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("risk:\n  cvar_limt: -0.04\n")
    with pytest.raises(ConfigError, match=r"risk.cvar_limt: unknown key; did you mean risk\.cvar"):
        Config.from_yaml(path)


def test_a_mistyped_env_kwarg_is_one_line_before_training(tmp_path, capsys) -> None:
    argv = ["train", "--set", "env.kwargs.fe=0.001", "--run-dir", str(tmp_path / "r")]
    line = one_line(argv, capsys)
    assert line == (
        "riskppo: configuration error: env.kwargs.fe: riskppo/Trading-v0 takes no argument "
        "'fe'; did you mean env.kwargs.fee?"
    )


def test_env_kwargs_are_checked_against_the_ids_constructor() -> None:
    register_envs()
    check_env_kwargs("riskppo/Trading-v0", {"fee": 0.001, "max_episode_steps": 9})
    check_env_kwargs("riskppo/MaskedVelocityCartPole-v1", {"sutton_barto_reward": True})
    with pytest.raises(ConfigError, match=r"did you mean env.kwargs.sutton_barto_reward\?$"):
        check_env_kwargs("riskppo/MaskedVelocityCartPole-v1", {"sutton_barto_rewad": True})
    with pytest.raises(ConfigError, match=r"CartPole-v1 takes no argument 'fee'; valid keys"):
        check_env_kwargs("CartPole-v1", {"fee": 0.001})
    check_env_kwargs("not_a_module:Nothing-v0", {"anything": 1})  # left to gym.make to report


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ("4", "gain 5359.8% on average"),
        ("0.04", "gain 4.1% on average"),
        ("-4", "lose 98.2% on average"),
        ("-1.5", "lose 77.7% on average"),
    ],
)
def test_a_cvar_limit_in_percent_or_of_the_wrong_sign_is_refused(limit: str, says: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, [f"risk.cvar_limit={limit}"])  # the default: trading
    message = str(ei.value)
    assert says in message and f"risk.cvar_limit={float(limit)}: " in message
    pct = abs(float(limit)) if abs(float(limit)) >= 1 else 100 * abs(float(limit))
    assert message.endswith(f"write risk.cvar_limit={-pct / 100:g}")


def test_cvar_limits_that_make_sense_are_kept() -> None:
    for limit in ("0", "-0.04", "-1"):
        load_config(None, [f"risk.cvar_limit={limit}"])
    # the limit is in reward units: reward_scale=100 makes -4 a 4% loss
    load_config(None, ["env.kwargs.reward_scale=100", "risk.cvar_limit=-4"])
    # other envs' rewards are not log returns: any limit
    load_config(None, ["env.id=CartPole-v1", "env.kwargs={}", "risk.cvar_limit=10"])


@pytest.mark.parametrize("source", ["file", "teacher"])
def test_behaviour_cloning_without_a_weight_is_refused(source: str) -> None:
    extra = ["bc.path=d.safetensors"] if source == "file" else []
    with pytest.raises(ConfigError, match=rf"bc.source={source} with bc.bc_coef=0 clones nothing"):
        apply_overrides(Config(), [f"bc.source={source}", *extra])
    apply_overrides(Config(), [f"bc.source={source}", *extra, "bc.bc_coef=1"])


def test_record_refuses_a_wrong_suffix_before_recording(tmp_path, capsys) -> None:
    line = one_line(["record", str(tmp_path / "demo.csv")], capsys)
    assert line.endswith(f"not '.csv'; write it as {tmp_path / 'demo.safetensors'} (or .parquet "
                         "for a table)")  # fmt: skip
    assert line.startswith("riskppo: demonstration error: ")
    assert not (tmp_path / "demo.csv").exists()


def test_bench_runs_in_the_users_directory(tmp_path, monkeypatch) -> None:
    """A benchmark's relative paths (``--data-path``, ``--out``) are the user's."""
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "_common.py").write_text("")
    (bench / "where.py").write_text(
        "import sys\nfrom pathlib import Path\nPath(sys.argv[1]).write_text(str(Path.cwd()))\n"
    )
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.chdir(user)
    monkeypatch.setattr(cli_bench, "benchmarks_dir", lambda: bench)
    assert main(["bench", "where", "out.txt"]) == 0
    assert (user / "out.txt").read_text() == str(user)


@pytest.mark.parametrize("command", ["train", "walkforward", "pbt"])
def test_a_bad_data_file_answers_before_torch_loads(command: str, tmp_path: Path) -> None:
    """``train``, ``walkforward`` and ``pbt`` read the data before the model's libraries: with a
    ``torch`` that fails on import first on the path, a missing single-asset file and a
    malformed portfolio file still get their one line."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.getcwd()])}
    bad, other = tmp_path / "bad.csv", tmp_path / "other.csv"
    bad.write_text("date,close\n2020-01-01,abc\n2020-01-02,1.0\n")
    other.write_text("date,close\n2020-01-01,1.0\n2020-01-02,1.0\n")
    cases = [
        (["--config", "trading_googl", "--set", "data.dataset=null", "--set",
          f"data.path={tmp_path / 'none.csv'}"], "none.csv: no such file"),
        (["--config", "portfolio_sp20", "--set", "env.kwargs.dataset=null", "--set",
          f"env.kwargs.paths=[{other},{bad}]"], "non-numeric value 'abc' in column 'close'"),
    ]  # fmt: skip
    for args, says in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "riskppo.cli", command, *args, "--run-dir", str(tmp_path / "r")],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
        assert not (tmp_path / "r").exists()
