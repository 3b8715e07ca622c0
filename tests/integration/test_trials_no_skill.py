"""The trial ledger stops a user from finding an edge by trying configurations: a small run of
``benchmarks/trials_no_skill.py``'s simulation. On seeded no-edge markets the best of 20
no-skill configurations, each recorded in a real ledger, claims an edge far more often than 5%
when its verdict is read with N = 1; read with the ledger's N, at most at the test's size (within
3 Monte Carlo standard errors). The configurations know nothing about later returns."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest

from tests.benchmark_modules import BENCH, import_benchmark

pytestmark = pytest.mark.skipif(
    not (BENCH / "trials_no_skill.py").is_file(),
    reason="no benchmarks/ folder (an installed wheel)",
)

REPS = 16
K = 20


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    return import_benchmark("trials_no_skill")


def test_the_ledgers_n_holds_the_best_of_20_to_the_tests_size(sim: ModuleType) -> None:
    result = sim.simulate(REPS, configs=[K], markets=["zero"], spa=False, seed=0)
    t = result["zero"][K]
    assert t.reps == REPS
    assert t.n_used == [K] * REPS  # every verdict's N came from the ledger: 20 configurations
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPS)  # the size, plus 3 Monte Carlo SEs
    assert t.claim_ledger / REPS <= bound, t.to_dict()
    # without the ledger (N = 1) the same verdicts claim an edge far more often (6 of 16
    # here): the bound above fails if the verdict did not read the ledger's N
    assert t.claim_n1 / REPS > bound, t.to_dict()
    assert len(t.pbo) == REPS and 0.0 <= float(np.mean(t.pbo)) <= 1.0


def test_a_configuration_knows_nothing_after_its_decision_bar(sim: ModuleType) -> None:
    rng_close = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(0.01 * rng_close.standard_normal(400)))
    later = close.copy()
    later[300:] *= np.exp(0.05 * rng_close.standard_normal(100))  # other bars from 300 on
    first, steps = 150, 249
    for k in range(8):  # timing (even k) and rules (odd k)
        a = sim.config_signals(k, np.random.default_rng(k), close, first, steps, (0.25, 1.0))
        b = sim.config_signals(k, np.random.default_rng(k), later, first, steps, (0.25, 1.0))
        assert a[0] == b[0]
        decided_before = 300 - first  # decision bars first .. 299
        np.testing.assert_array_equal(a[1][:decided_before], b[1][:decided_before])
        assert a[1].min() >= 0.25 and a[1].max() <= 1.0
