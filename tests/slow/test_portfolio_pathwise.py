"""The pathwise term on the portfolio env (an action of one number per asset): on four assets
with a planted one-day momentum each, the agent tilts its weights towards the assets whose last
return was high — much further with the term than without it (slow: about 20 s each)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riskppo import DistributionalPPO
from riskppo.config import Config, apply_overrides
from riskppo.config.bundled import resolve_config_path
from riskppo.envs.market.planted import ar_market
from riskppo.envs.portfolio.factory import make_portfolio_env

pytestmark = pytest.mark.slow


def _tilt_vs_planted(tmp_path, pathwise: float) -> tuple[float, float]:
    """Four ``ar_market(2000, phi=0.15)`` assets, long-only softmax weights read linearly from
    each asset's last vol-scaled return, 60,000 steps; on the training bars: the correlation of
    the weights' log tilt ``log w_i − mean_j log w_j`` with the cross-sectionally demeaned last
    log return, and the tilt's sd."""
    paths, info = [], []
    for i in range(4):
        df, planted = ar_market(2000, phi=0.15, seed=10 + i)
        path = tmp_path / f"A{i}.csv"
        df.to_csv(path)
        paths.append(str(path))
        info.append(planted.info)
    last = np.stack(info, axis=1)  # [T, N] the log return of each bar
    sets = [
        "env.kwargs.dataset=null",
        f"env.kwargs.paths={json.dumps(paths)}",
        "env.kwargs.features=[vret_1]",
        "env.kwargs.exposure_signal=false",
        "env.kwargs.min_signal=0",
        "env.kwargs.overlay=null",
        "env.kwargs.reward_slopes=true",
        f"ppo.pathwise_coef={pathwise}",
        "ppo.pathwise_utility=sharpe",
        "policy.memory=false",
        "policy.net_arch=[]",
        "policy.log_std_init=-1.5",
        "risk.cvar_limit=null",
        "total_timesteps=60000",
    ]
    cfg = apply_overrides(Config.from_yaml(resolve_config_path("portfolio_sp20")), sets)
    model = DistributionalPPO(config=cfg)
    model.learn(cfg.total_timesteps)
    env = make_portfolio_env(**{**cfg.env.kwargs, "random_start": False, "episode_length": None})
    obs, _ = env.reset()
    state, start, tilts, seen = None, np.array([True]), [], []
    done = False
    while not done:
        bar = env.trading_range[0] + len(tilts)
        action, state = model.predict(obs[None], state, start, deterministic=True, raw=True)
        log_w = np.log(env.signal_weights(action[0]))
        tilts.append(log_w - log_w.mean())
        seen.append(last[bar] - last[bar].mean())
        obs, _, terminated, truncated, _ = env.step(action[0])
        start, done = np.array([False]), terminated or truncated
    tilt = np.asarray(tilts)
    return float(np.corrcoef(tilt.ravel(), np.asarray(seen).ravel())[0, 1]), float(tilt.std())


@pytest.mark.parametrize("pathwise", [1.0, 0.0])
def test_the_portfolio_agent_follows_a_planted_momentum_with_the_pathwise_term(tmp_path, pathwise):
    """Measured: with the term corr 0.66, tilt sd 0.70; without it (the score function alone)
    corr 0.47, tilt sd 0.19 — weights that hardly leave equal weight. With the term switched off
    for actions of more than one number (as before it followed them), the first case fails."""
    corr, sd = _tilt_vs_planted(tmp_path, pathwise)
    if pathwise:
        assert corr > 0.5 and sd > 0.4, (corr, sd)
    else:
        assert sd < 0.3, (corr, sd)
