"""The lines ``riskppo pbt`` prints at the end of a population, from its summary
(:func:`riskppo.pbt.local.summary_lines`; the population itself prints nothing)."""

from __future__ import annotations

from pathlib import Path

from riskppo.pbt.local import summary_lines


def test_the_best_member_and_every_failed_interval() -> None:
    summary = {
        "metric": "eval/mean_reward",
        "best_member": 2,
        "best_score": 123.456789,
        "n_exploits": 3,
        "n_failures": 1,
        "failures": [{"member": 1, "round": 1, "reason": "worker died", "action": "restart"}],
    }
    assert summary_lines(summary, Path("runs/p")) == [
        "riskppo pbt: best member m2 (eval/mean_reward 123.5), 3 exploits, 1 failed interval(s) "
        "→ runs/p/pbt_history.jsonl",
        "riskppo pbt: m1 failed in round 1 (worker died): restart",
    ]
    clean = summary | {"n_failures": 0, "failures": []}
    assert summary_lines(clean, Path("runs/p")) == [
        "riskppo pbt: best member m2 (eval/mean_reward 123.5), 3 exploits → "
        "runs/p/pbt_history.jsonl"
    ]


def test_a_ray_summary_has_none() -> None:
    assert summary_lines({"backend": "ray", "best_member": "t1"}, Path("runs/p")) == []
