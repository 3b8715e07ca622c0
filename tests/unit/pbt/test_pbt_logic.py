"""PBT explore/select/sample (R-PBT-2): bounds, truncation selection, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riskppo.config import Config, ConfigError, HyperparamSpec
from riskppo.pbt import explore, sample_hyperparams, truncation_selection
from riskppo.pbt.member import (
    constrained_score,
    constraint_violation,
    member_config,
    resolve_metric,
)

SPACE = {
    "ppo.learning_rate": HyperparamSpec(low=1e-5, high=1e-2),
    "ppo.clip_range": HyperparamSpec(low=0.1, high=0.3, log=False),
}


def test_samples_lie_within_bounds_and_cover_the_log_range() -> None:
    rng = np.random.default_rng(0)
    draws = [sample_hyperparams(SPACE, rng) for _ in range(2000)]
    lrs = np.array([d["ppo.learning_rate"] for d in draws])
    clips = np.array([d["ppo.clip_range"] for d in draws])
    assert lrs.min() >= 1e-5 and lrs.max() <= 1e-2
    assert clips.min() >= 0.1 and clips.max() <= 0.3
    # log-uniform: each decade gets about a third of the draws; uniform: the mean is the middle
    decades = np.histogram(np.log10(lrs), bins=[-5, -4, -3, -2])[0] / len(lrs)
    assert np.allclose(decades, 1 / 3, atol=0.05)
    assert abs(clips.mean() - 0.2) < 0.01


def test_explore_perturbs_by_the_factors_or_resamples_and_clips() -> None:
    rng = np.random.default_rng(1)
    start = {"ppo.learning_rate": 1e-3, "ppo.clip_range": 0.2}
    for _ in range(200):
        new = explore(start, SPACE, rng, factors=(0.8, 1.2), resample_prob=0.0)
        assert math.isclose(new["ppo.learning_rate"], 8e-4) or math.isclose(
            new["ppo.learning_rate"], 1.2e-3
        )
    at_edge = {"ppo.learning_rate": 1e-2, "ppo.clip_range": 0.3}
    ups = [explore(at_edge, SPACE, rng, resample_prob=0.0) for _ in range(100)]
    assert max(u["ppo.learning_rate"] for u in ups) == 1e-2  # ×1.2 clipped to the bound
    assert max(u["ppo.clip_range"] for u in ups) == 0.3
    resampled = [explore(start, SPACE, rng, resample_prob=1.0) for _ in range(200)]
    distinct = {round(r["ppo.learning_rate"], 12) for r in resampled}
    assert len(distinct) > 150  # fresh draws, not ×0.8/×1.2
    assert all(1e-5 <= r["ppo.learning_rate"] <= 1e-2 for r in resampled)


def test_truncation_selection_bottom_copies_top() -> None:
    scores = {0: 5.0, 1: -1.0, 2: 9.0, 3: 2.0, 4: 7.0, 5: 0.5, 6: 3.0, 7: 8.0}
    rng = np.random.default_rng(0)
    for _ in range(50):
        pairs = truncation_selection(scores, 0.25, rng)
        assert sorted(t for t, _ in pairs) == [1, 5]  # the two worst
        assert all(s in (2, 7) for _, s in pairs)  # copy one of the two best


def test_truncation_selection_ranks_non_finite_last_and_zero_quantile_never_exploits() -> None:
    rng = np.random.default_rng(0)
    pairs = truncation_selection({0: float("nan"), 1: 1.0, 2: 3.0, 3: 2.0}, 0.25, rng)
    assert pairs == [(0, 2)]
    assert truncation_selection({0: 1.0, 1: 2.0}, 0.0, rng) == []
    # a quantile over half would make a member both source and target: capped at half
    assert len(truncation_selection({i: float(i) for i in range(5)}, 0.5, rng)) == 2


def test_member_config_sets_seed_hyperparams_and_ready_checkpoints() -> None:
    base = Config.build({"seed": 3, "pbt": {"ready_updates": 7}})
    cfg = member_config(base, 2, {"ppo.learning_rate": 5e-4, "ppo.ent_coef": 0.01})
    assert cfg.seed == 2003
    assert cfg.ppo.learning_rate == 5e-4 and cfg.ppo.ent_coef == 0.01
    assert cfg.checkpoint.every_updates == 7


def test_pbt_config_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="cannot tune"):
        Config.build({"pbt": {"hyperparams": {"ppo.n_steps": {"low": 1, "high": 2}}}})
    with pytest.raises(ConfigError, match="log=true needs low > 0"):
        Config.build({"pbt": {"hyperparams": {"risk.cvar_limit": {"low": -1, "high": 0}}}})
    with pytest.raises(ConfigError, match="must be > low"):
        Config.build({"pbt": {"hyperparams": {"ppo.ent_coef": {"low": 0.1, "high": 0.01}}}})
    with pytest.raises(ConfigError, match=r"risk\.cvar_limit is None"):
        Config.build(
            {"pbt": {"hyperparams": {"risk.cvar_limit": {"low": -1, "high": 0, "log": False}}}}
        )


def test_selection_metric_defaults() -> None:
    assert resolve_metric(Config.build({"env": {"id": "CartPole-v1"}})) == "mean_return"
    assert resolve_metric(Config.build({"env": {"id": "riskppo/Trading-v0"}})) == "sharpe"
    with pytest.raises(ValueError, match="needs a bar env"):
        resolve_metric(Config.build({"env": {"id": "CartPole-v1"}, "pbt": {"metric": "sharpe"}}))


def test_portfolio_members_are_ranked_by_the_trading_metrics() -> None:
    """The portfolio env is scored like the trading env (validation Sharpe, feasibility first;
    tests/integration/test_pbt.py), and takes the trading metrics."""
    portfolio = {"env": {"id": "riskppo/Portfolio-v0"}}
    assert resolve_metric(Config.build(portfolio)) == "sharpe"
    assert resolve_metric(Config.build({**portfolio, "pbt": {"metric": "sortino"}})) == "sortino"


def test_pbt_refuses_an_lr_schedule(tmp_path) -> None:
    from riskppo.pbt import run_pbt

    cfg = Config.build({"ppo": {"lr_schedule": "linear"}})
    with pytest.raises(ConfigError, match="lr_schedule='linear' with PBT"):
        run_pbt(cfg, tmp_path / "run", progress_bar=False)
    assert not (tmp_path / "run").exists()  # refused before anything was written


LIMIT = -0.06


def _score(sharpe, cvar, share, limit=LIMIT, min_share=0.5):
    return constrained_score(
        sharpe, cvar=cvar, limit=limit, market_share=share, min_market_share=min_share
    )[0]


def _ranked(scores: dict[str, float]) -> list[str]:
    """Best first, as truncation_selection ranks."""
    return sorted(scores, key=lambda k: -scores[k])


def test_feasible_trader_outranks_flat_and_infeasible_members() -> None:
    scores = {
        "trader": _score(-0.5, cvar=-0.05, share=0.8),  # feasible, losing money
        "flat": _score(None, cvar=0.0, share=0.0),  # never in the market: CVaR 0 "meets" it
        "risky": _score(2.0, cvar=-0.09, share=0.9),  # great Sharpe, breaks the limit
        "part_time": _score(1.5, cvar=-0.03, share=0.3),  # meets the limit, too rarely in
    }
    assert scores["trader"] == -0.5
    assert _ranked(scores)[0] == "trader"
    assert all(math.isfinite(v) for v in scores.values())  # Ray needs finite scores
    # truncation selection: the bottom copies the feasible trader
    ids = dict(enumerate(scores))
    pairs = truncation_selection(
        {i: scores[k] for i, k in ids.items()}, 0.25, np.random.default_rng(0)
    )
    assert [ids[s] for _, s in pairs] == ["trader"]
    assert ids[pairs[0][0]] != "trader"


def test_infeasible_members_are_ordered_by_violation() -> None:
    a = _score(0.1, cvar=-0.07, share=0.9)  # 1/6 over the limit
    b = _score(3.0, cvar=-0.09, share=0.9)  # 1/2 over the limit
    c = _score(0.0, cvar=-0.02, share=0.4)  # 0.1 short of the market share
    d = _score(0.0, cvar=-0.02, share=0.0)  # flat: 0.5 short
    assert c > a > b and c > d  # less violation ranks higher, whatever the Sharpe
    assert d > _score(0.0, cvar=-0.12, share=0.0)  # flat and over the limit: lower still
    assert all(v < -999 for v in (a, b, c, d))


def test_violation_by_hand() -> None:
    assert constraint_violation(-0.05, LIMIT, 0.8, 0.5) == 0.0
    assert constraint_violation(-0.06, LIMIT, 0.5, 0.5) == 0.0  # on the limit and share: feasible
    assert constraint_violation(-0.09, LIMIT, 0.8, 0.5) == pytest.approx(0.5)
    assert constraint_violation(-0.05, LIMIT, 0.2, 0.5) == pytest.approx(0.3)
    assert constraint_violation(-0.09, LIMIT, 0.2, 0.5) == pytest.approx(0.8)
    assert constraint_violation(None, LIMIT, 0.8, 0.5) == 1.0  # unmeasured CVaR
    assert constraint_violation(-0.5, None, 0.8, 0.5) == 0.0  # no limit: only the share counts
    score, violation = constrained_score(
        2.0, cvar=-0.09, limit=LIMIT, market_share=0.2, min_market_share=0.5
    )
    assert violation == pytest.approx(0.8) and score == pytest.approx(-1e3 - 0.8)


def test_without_a_limit_flat_members_still_rank_below_every_trader() -> None:
    trader = _score(-2.0, cvar=-0.5, share=0.6, limit=None)
    flat = _score(None, cvar=0.0, share=0.0, limit=None)
    assert trader == -2.0 and flat < trader
    # a feasible member with an undefined metric still outranks every infeasible one
    undefined = _score(None, cvar=-0.01, share=0.9)
    assert flat < undefined < trader


def test_pbt_config_min_market_share_and_fixed_selection_limit() -> None:
    base = Config.build(
        {
            "env": {"id": "riskppo/Trading-v0"},
            "risk": {"cvar_limit": -0.06},
            "pbt": {
                "hyperparams": {
                    "ppo.learning_rate": {"low": 1e-4, "high": 1e-3},
                    "risk.cvar_limit": {"low": -0.12, "high": -0.02, "log": False},
                }
            },
        }
    )
    assert base.pbt.min_market_share == 0.5 and base.pbt.selection_cvar_limit is None
    # a member that tunes its own limit is still selected against the base config's
    cfg = member_config(base, 1, {"ppo.learning_rate": 3e-4, "risk.cvar_limit": -0.12})
    assert cfg.risk.cvar_limit == -0.12 and cfg.pbt.selection_cvar_limit == -0.06
    with pytest.raises(ConfigError, match="min_market_share"):
        Config.build({"pbt": {"min_market_share": 1.5}})
