"""What PBT writes into its run directory goes through :mod:`riskppo.safefs` like the rest of the
package (a symlink is replaced or refused, never written through), and the summary's best
member is one with a checkpoint whenever any member has one. Real files, no training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from riskppo.config import Config
from riskppo.pbt.local import PBTRun, append_jsonl, rollback_member_dir
from riskppo.pbt.state import LOGS, prepare_resume, save_state
from riskppo.safefs import UnsafePathError

SECRET = "secret\n"


def population(run: Path, size: int = 2) -> PBTRun:
    run.mkdir(exist_ok=True)
    cfg = Config.build({"env": {"id": "CartPole-v1"}, "pbt": {"population": size}})
    cfg.to_yaml(run / "config.yaml")
    return PBTRun(cfg, run)


def link_to_victim(path: Path, tmp_path: Path) -> Path:
    """``path`` made a symlink to a fresh file holding :data:`SECRET`; returns that file."""
    victim = tmp_path / f"victim-{path.name}"
    victim.write_text(SECRET)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim)
    return victim


def test_the_summary_and_the_state_replace_a_symlink_and_leave_its_target(tmp_path) -> None:
    """Links at the files and at the temporary names a writer might use (the state was once
    written through ``pbt/.state.json.tmp``)."""
    run = tmp_path / "run"
    pbt = population(run)
    names = ["pbt_summary.json", "pbt/state.json", "pbt/.state.json.tmp"]
    victims = [link_to_victim(run / name, tmp_path) for name in names]
    pbt.write_summary()
    save_state(run, pbt.state())
    for path in (run / "pbt_summary.json", run / "pbt" / "state.json"):
        assert path.is_file() and not path.is_symlink()
    assert [v.read_text() for v in victims] == [SECRET] * 3


@pytest.mark.parametrize("name", LOGS)
def test_a_symlinked_log_is_refused_and_its_target_untouched(tmp_path, name) -> None:
    run = tmp_path / "run"
    population(run)
    victim = link_to_victim(run / name, tmp_path)
    with pytest.raises(UnsafePathError, match=f"{name} is a symlink"):
        append_jsonl(run / name, {"member": 0})
    # resuming cuts a log back to its recorded length: never the file a link points to
    pbt = population(run)
    with pytest.raises(UnsafePathError, match=f"{name} is a symlink"):
        prepare_resume(run, pbt.state(), {n: 0 for n in LOGS})
    assert victim.read_text() == SECRET


def test_rolling_a_member_back_replaces_a_symlinked_latest_pointer(tmp_path) -> None:
    """Links at ``latest`` and at ``.latest.tmp`` (the name the pointer was once written
    through)."""
    ckpts = tmp_path / "m0" / "checkpoints"
    (ckpts / "ckpt-000000000064").mkdir(parents=True)
    victims = [link_to_victim(ckpts / name, tmp_path) for name in ("latest", ".latest.tmp")]
    rollback_member_dir(tmp_path / "m0", ckpts / "ckpt-000000000064", {"ckpt-000000000064"})
    assert not (ckpts / "latest").is_symlink()
    assert (ckpts / "latest").read_text() == "ckpt-000000000064"
    assert [v.read_text() for v in victims] == [SECRET, SECRET]


def test_best_is_a_member_with_a_checkpoint_when_every_last_round_failed(tmp_path) -> None:
    """m0 never finished a round (no checkpoint), m1 and m2 finished round 0 (scores 0.5 and
    1.5) and failed the last one: all score -inf now. The best is m2, the member whose
    checkpoint scored best, not m0 (the lowest id among equal scores)."""
    pbt = population(tmp_path / "run", size=3)
    _, m1, m2 = pbt.members
    for m in pbt.members:
        m.performance = -math.inf
    m1.checkpoint, m1.checkpoint_score = tmp_path / "m1" / "ckpt-000000000064", 0.5
    m2.checkpoint, m2.checkpoint_score = tmp_path / "m2" / "ckpt-000000000064", 1.5
    assert pbt.best() is m2
    summary = pbt.write_summary()
    assert summary["best_member"] == 2
    assert summary["best_checkpoint"] == str(m2.checkpoint)
    # a member that scored this round wins over every checkpoint's old score
    m1.performance = 0.1
    assert pbt.best() is m1
    # no checkpoint anywhere: the summary says so (best_checkpoint None, reported by the CLI)
    m1.checkpoint = m2.checkpoint = None
    assert pbt.write_summary()["best_checkpoint"] is None


def test_the_population_plot_replaces_a_symlink(tmp_path) -> None:
    from riskppo.pbt.report import plot_population

    run = tmp_path / "run"
    population(run).write_summary()
    victim = link_to_victim(run / "pbt_summary.png", tmp_path)
    plot_population(run)
    assert not (run / "pbt_summary.png").is_symlink()
    assert victim.read_text() == SECRET
