"""Every riskppo error reaches a CLI user as one line and exit code 2; warnings as one clean line;
``eval`` falls back to an older good checkpoint like ``--resume``.

Real runs, real corrupt files and paths, the CLI in real processes or through ``main``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from riskppo import cli
from riskppo.persist.files import sha256
from tests.compilers import env_without_kernel, without_kernel_notice

TINY = """\
seed: 0
total_timesteps: 256
env: {id: CartPole-v1, n_envs: 2}
ppo: {n_steps: 16, batch_size: 32, bptt_len: 8, n_epochs: 1}
policy: {lstm_hidden_size: 16}
checkpoint: {every_updates: 2, keep_last: 5}
"""


def run_cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python -m riskppo.cli ARGS`` in a real process."""
    return subprocess.run(
        [sys.executable, "-m", "riskppo.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        **kwargs,
    )


def one_line_error(stderr: str, start: str) -> str:
    """The error line of a CLI that failed as a user error: the last line of stderr, starting
    with ``start``; every line is a ``riskppo:`` line (warnings included), no traceback."""
    lines = stderr.splitlines()
    assert lines and "Traceback" not in stderr, stderr
    assert all(line.startswith("riskppo: ") for line in lines), stderr
    assert lines[-1].startswith(start), stderr
    return lines[-1]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CartPole run with four checkpoints (64, 128, 192, 256 steps)."""
    root = tmp_path_factory.mktemp("cli-errors")
    (root / "tiny.yaml").write_text(TINY)
    args = ["train", "--config", str(root / "tiny.yaml"), "--run-dir", str(root / "run")]
    assert cli.main([*args, "--no-progress"]) == 0
    return root / "run"


@pytest.fixture()
def run(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny run, to break."""
    return Path(shutil.copytree(tiny_run, tmp_path / "run"))


def ckpts(run: Path) -> list[Path]:
    """The run's checkpoint directories, newest first."""
    return sorted((run / "checkpoints").glob("ckpt-*"), reverse=True)


def test_eval_falls_back_to_an_older_good_checkpoint_with_one_warning_line(run: Path) -> None:
    newest, older = ckpts(run)[:2]
    (newest / "model.safetensors").write_bytes(os.urandom(100))  # corrupt the latest
    proc = run_cli("eval", str(run), "--episodes", "1")
    assert proc.returncode == 0, proc.stderr
    assert without_kernel_notice(proc.stderr) == [
        f"riskppo: warning: skipping bad checkpoint: {newest}: model.safetensors is corrupted "
        "(SHA-256 mismatch)"
    ]
    assert f"{older.name} (" in proc.stdout  # the table names the checkpoint evaluated


def test_eval_ignores_a_latest_pointer_outside_the_run(run: Path, capsys) -> None:
    (run / "checkpoints" / "latest").write_text("../../elsewhere")
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"riskppo: warning: ignoring the latest pointer: {run / 'checkpoints'}: latest names "
        "'../../elsewhere', not a sibling checkpoint"
    ]
    assert '"checkpoint": "' + ckpts(run)[0].name in (run / "evaluation.json").read_text()


@pytest.mark.parametrize("command", [["eval"], ["train", "--resume"]])
def test_no_usable_checkpoint_is_one_line_and_exit_code_2(run: Path, command, capsys) -> None:
    for path in ckpts(run):
        (path / "state.json").write_text("{}")
    assert cli.main([*command, str(run)]) == 2
    err = capsys.readouterr().err
    line = one_line_error(err, "riskppo: checkpoint error: ")
    assert f"{run}: no usable checkpoint" in line and "riskppo train" in line
    assert err.count("riskppo: warning: skipping bad checkpoint: ") == 4  # one line each


def test_resume_of_a_run_without_checkpoints_is_one_line(run: Path, capsys) -> None:
    shutil.rmtree(run / "checkpoints")
    assert cli.main(["train", "--resume", str(run), "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: checkpoint error: ")
    assert "no usable checkpoint" in line
    restart = f"riskppo train --config {run / 'config.yaml'} --run-dir {run} --force"
    assert line.endswith(f"start this one again with: {restart}")
    assert cli.main([*restart.split()[1:], "--no-progress"]) == 0  # and it does


def test_train_on_a_broken_user_csv_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text("date,open,high,low,close\n2020-01-01,1,2,x\n")
    proc = run_cli(
        "train", "--set", f"data.path={bad}", "--run-dir", str(tmp_path / "r"), "--no-progress"
    )
    assert proc.returncode == 2
    line = one_line_error(proc.stderr, f"riskppo: data error: {bad}: ")
    assert "point data.path at another one" in line


def test_unknown_env_id_is_one_line(tmp_path: Path, capsys) -> None:
    args = ["train", "--set", "env.id=NoSuchEnv-v0", "--run-dir", str(tmp_path / "r")]
    assert cli.main(args) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: env error: ")
    assert "NoSuchEnv" in line and "check env.id" in line


def test_a_bad_fill_is_one_line_naming_it_and_the_allowed_values(tmp_path: Path, capsys) -> None:
    args = ["train", "--set", "env.kwargs.fill=tomorrow", "--run-dir", str(tmp_path / "r")]
    assert cli.main([*args, "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: configuration error: trading env")
    assert "fill='tomorrow' is invalid: must be one of " in line
    assert "('auto', 'close', 'next_open', 'next_close')" in line
    # a run that never started leaves nothing behind: the corrected command is not refused
    assert set(os.listdir(tmp_path / "r")) <= {".lock"}


class StringObsEnv(gym.Env):
    """Returns a string as its observation at the second step."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return ("oops" if self.t == 2 else np.zeros(2, np.float32)), 0.0, False, False, {}


def test_a_bad_env_output_is_one_line_naming_env_and_step(tmp_path: Path, capsys) -> None:
    gym.register("RiskppoTestStringObs-v0", entry_point=StringObsEnv)
    (tmp_path / "c.yaml").write_text(TINY.replace("CartPole-v1", "RiskppoTestStringObs-v0"))
    args = ["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "r")]
    assert cli.main([*args, "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: env error: env 0 (")
    assert "step() returned an observation of shape ()" in line and "'oops'" in line
    assert "at step 2 of its episode, at vec step 2" in line


def test_a_run_dir_below_a_regular_file_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "c.yaml").write_text(TINY)
    (tmp_path / "afile").write_text("x")
    args = ["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "afile/r")]
    assert cli.main(args) == 2
    line = one_line_error(capsys.readouterr().err, f"riskppo: {tmp_path / 'afile/r'}: ")
    assert line.endswith(
        "Not a directory; check the path (a part of it is a file, not a directory)"
    )


def unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` as a user that file permissions apply to (root ignores them)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory another user can read (pytest's tmp_path is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="riskppo-perm-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_permission_denied_is_one_line(shared_dir: Path) -> None:
    (shared_dir / "c.yaml").write_text(TINY)
    (shared_dir / "c.yaml").chmod(0o644)
    readonly = shared_dir / "readonly"
    readonly.mkdir()
    readonly.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH)
    args = ["train", "--config", str(shared_dir / "c.yaml"), "--run-dir", str(readonly / "r")]
    home = shared_dir / "home"  # writable for matplotlib's cache
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home)}
    proc = subprocess.run(
        unprivileged([sys.executable, "-m", "riskppo.cli", *args, "--no-progress"]),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=shared_dir,
    )
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc.stderr, f"riskppo: {readonly / 'r'}: Permission denied; ")
    assert line.endswith("check its permissions or choose another path")


def test_a_count_below_one_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval", "somewhere", "--episodes", "0"])
    assert exit_.value.code == 2
    assert "argument --episodes: expected an integer ≥ 1, got 0" in capsys.readouterr().err


def test_warnings_are_one_clean_line_in_the_cli_only(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TINY.replace("256", "64"))
    args = ["--config", str(tmp_path / "c.yaml"), "--set", "risk.cvar_alpha=0.001"]
    proc = run_cli("train", *args, "--run-dir", str(tmp_path / "r"), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert without_kernel_notice(proc.stderr) == [
        "riskppo: warning: risk.cvar_alpha=0.001 < 1/32: the critic's 32 quantiles cannot "
        "resolve a tail that small; the predicted CVaR is then the lowest quantile. Use more "
        "quantiles/atoms or a larger alpha."
    ]
    # main puts Python's own display back: library users keep the normal warnings
    before = warnings.showwarning
    assert cli.main(["eval", str(tmp_path / "r"), "--episodes", "1"]) == 0
    assert warnings.showwarning is before


class Bug(Exception):
    pass


@pytest.mark.parametrize(
    "error",
    [Bug("a bug"), KeyError("x"), OSError(errno.EMFILE, "Too many open files")],
    ids=["exception", "KeyError", "EMFILE"],
)
def test_an_internal_bug_keeps_its_traceback(error, tmp_path: Path, monkeypatch) -> None:
    import riskppo.cli.runner

    def broken(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(riskppo.cli.runner, "train_run", broken)
    with pytest.raises(type(error)):
        cli.main(["train", "--run-dir", str(tmp_path / "r")])


# Values the validator used to accept and that then crashed with a traceback when the model was
# built (or allocated gigabytes first).
UNBUILDABLE_SETS = [
    ("seed=10000000000000000000000", "seed: "),
    ("num_threads=1000000", "num_threads: "),
    ("num_threads=1.0e+22", "num_threads: "),
    ("policy.net_arch=[-5]", "policy.net_arch: every width must be ≥ 1 (got [-5])"),
    ("policy.net_arch=[0]", "policy.net_arch: every width must be ≥ 1 (got [0])"),
    ("policy.lstm_hidden_size=50000", "policy.lstm_hidden_size=50000"),
    ("policy.n_lstm_layers=100000", "policy.n_lstm_layers=100000"),
    ("critic.n_quantiles=100000000", "critic.n_quantiles: "),
    ("policy.log_std_init=1.0e+308", "policy.log_std_init: "),
    ("critic.v_min=-1.0e+308", "critic.v_min: "),
    ("critic.v_max=1.0e+308", "critic.v_max: "),
    ("risk.cvar_window=10000000000000000000000", "risk.cvar_window: "),
    ("risk.cvar_horizon=10000000000000000000000", "risk.cvar_horizon: "),
    ("env.kwargs.=1", "--set 'env.kwargs.': "),
    ("seed=" + "9" * 5000, "--set 'seed': an integer of more than 4300 digits"),
]


@pytest.mark.parametrize(("item", "message"), UNBUILDABLE_SETS, ids=lambda v: str(v)[:40])
def test_unbuildable_set_values_are_one_line(item: str, message: str, tmp_path: Path, capsys):
    args = ["train", "--set", "env.id=CartPole-v1", "--set", item, "--run-dir", str(tmp_path)]
    assert cli.main([*args, "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: configuration error: ")
    assert message in line and len(line) < 600, line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"seed: 1\nseed: 2\n", "duplicate key 'seed' on line 2 (first on line 1)"),
        (bytes(range(128, 256)), "not UTF-8 text (byte 0x80 at offset 0)"),
        (b"seed: " + b"9" * 5000, "an integer of more than 4300 digits"),
    ],
    ids=["duplicate-key", "binary", "huge-integer"],
)
def test_unusable_yaml_files_are_one_line(text: bytes, message: str, tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_bytes(text)
    proc = run_cli("train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    line = one_line_error(proc.stderr, f"riskppo: configuration error: {tmp_path / 'c.yaml'}: ")
    assert message in line, line


def test_an_unbuildable_value_in_a_checkpoint_config_is_one_line(run: Path, capsys) -> None:
    """The same bounds guard a checkpoint's config.json (edited, its hash made to match)."""
    for path in ckpts(run):
        config = json.loads((path / "config.json").read_text())
        config["policy"]["net_arch"] = [-5]
        (path / "config.json").write_text(json.dumps(config))
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["files"]["config.json"] = sha256(path / "config.json")
        (path / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["eval", str(run), "--episodes", "1"]) == 2
    line = one_line_error(capsys.readouterr().err, "riskppo: checkpoint error: ")
    assert "config/state unreadable: invalid configuration: policy.net_arch: every width" in line


def test_workers_warnings_and_the_kernel_notice_are_one_line_each(tmp_path: Path) -> None:
    """Without the C kernel (RISKPPO_NATIVE=0, as with no compiler), ``riskppo pbt`` on two
    workers says so once, in the CLI's form; a warning every member raises (in worker
    processes, at building and at resuming the member: two source lines) is one line too."""
    from tests.integration.test_pbt_faults import tiny

    tiny(rounds=2, population=2).to_yaml(tmp_path / "pbt.yaml")
    cmd = ["pbt", "--config", str(tmp_path / "pbt.yaml"), "--run-dir", str(tmp_path / "r")]
    proc = run_cli(*cmd, "--set", "risk.cvar_alpha=0.01", "--no-progress", env=env_without_kernel())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "riskppo: warning: native LSTM kernel unavailable (RISKPPO_NATIVE=0); using the PyTorch "
        "kernel (slower)",
        "riskppo: warning: risk.cvar_alpha=0.01 < 1/8: the critic's 8 quantiles cannot resolve a "
        "tail that small; the predicted CVaR is then the lowest quantile. Use more "
        "quantiles/atoms or a larger alpha.",
    ]
