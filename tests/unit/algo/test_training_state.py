"""The training state is serialised whole and decoded on a template that trusts nothing
(R-REL-3): a field added to the state is saved without a hand-kept list; a saved
state of the wrong shape, type or range is refused with the field's path."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from riskppo import DistributionalPPO
from riskppo.agent.loading import adopted_state
from riskppo.algo.returns import RewardMoments
from riskppo.algo.state import TrainingState, check_invariants, initial_training_state
from riskppo.config import Config
from riskppo.persist.codec import StateDecodeError, decode, encode

FIXTURE = Path(__file__).parents[2] / "fixtures"


def risky_config() -> Config:
    return Config.build({"risk": {"cvar_limit": -1.0, "cvar_window": 5}, "env": {"n_envs": 4}})


def played(state: TrainingState) -> TrainingState:
    """A state that is not the initial one anywhere (so a field left out would show)."""
    assert state.risk is not None
    torch.rand(5, generator=state.rng.sample)
    risk = dataclasses.replace(
        state.risk, lam=0.7, acc=torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float64)
    )
    risk.recent.extend([-1.0, 2.0])
    state.episodes.returns.extend([3.0, 4.0])
    state.episodes.lengths.extend([10, 12])
    rewards = RewardMoments(0.001, 4e-4, 7)
    return state.replace(risk=risk, rewards=rewards).with_counters(
        num_timesteps=640, n_updates=5, nonfinite_skips=2
    )


def roundtrip(state: TrainingState, template: TrainingState) -> TrainingState:
    tree, tensors = encode(state, "training")
    tree = json.loads(json.dumps(tree))  # through JSON, as a checkpoint stores it
    return decode(template, tree, tensors, "training")


def test_roundtrip_restores_every_field() -> None:
    cfg = risky_config()
    state = played(initial_training_state(cfg, 4))
    back = roundtrip(state, initial_training_state(cfg, 4))
    assert back.counters == state.counters
    assert back.risk is not None and state.risk is not None
    assert back.risk.lam == 0.7 and torch.equal(back.risk.acc, state.risk.acc)
    assert list(back.risk.recent) == [-1.0, 2.0] and back.risk.recent.maxlen == 5
    assert list(back.episodes.lengths) == [10, 12]
    assert back.rewards == RewardMoments(0.001, 4e-4, 7)
    assert torch.equal(back.rng.sample.get_state(), state.rng.sample.get_state())
    assert back.carry is None  # transient


def test_a_new_field_is_saved_without_being_listed() -> None:
    """Mutation check: an encoder that walks a fixed list of fields loses ``extra``."""

    @dataclass(frozen=True)
    class Extended:
        base: TrainingState
        extra: torch.Tensor
        note: int = field(default=0, metadata={"min": 0})

    cfg = risky_config()
    state = Extended(played(initial_training_state(cfg, 4)), torch.arange(4.0), 7)
    template = Extended(initial_training_state(cfg, 4), torch.zeros(4), 0)
    back = roundtrip(state, template)  # type: ignore[arg-type]
    assert torch.equal(back.extra, torch.arange(4.0)) and back.note == 7


def tampered(path: str, value: object) -> tuple[object, dict[str, torch.Tensor]]:
    cfg = risky_config()
    tree, tensors = encode(played(initial_training_state(cfg, 4)), "training")
    *parents, leaf = path.split(".")
    node = tree
    for key in parents:
        node = node[key]
    if leaf in node and isinstance(node[leaf], dict) and "tensor" in node[leaf]:
        tensors[node[leaf]["tensor"]] = value  # type: ignore[assignment]
    elif value == "DELETE":
        del node[leaf]
    else:
        node[leaf] = value
    return tree, tensors


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("counters.n_updates", -1, "counters/n_updates: must be a finite number >= 0"),
        ("counters.n_updates", 1.5, "counters/n_updates: must be int"),
        ("counters.n_updates", True, "counters/n_updates: must be int"),
        ("counters.n_updates", "DELETE", "counters: must have exactly the fields"),
        ("counters.surprise", 1, "counters: must have exactly the fields"),
        ("entropy.coef", "0.1", "entropy/coef: must be float"),
        ("entropy.schedule.history", [1.0, "x"], "history: must be a list of numbers"),
        ("risk.acc", torch.zeros(3, dtype=torch.float64), r"risk/acc: torch.float64 \[3\]"),
        ("risk.acc", torch.zeros(4, dtype=torch.float32), "risk/acc: torch.float32"),
        ("risk.acc", torch.full((4,), float("inf"), dtype=torch.float64), "non-finite"),
        ("risk.scaling.moments.var", None, "tensor missing"),
        ("risk", None, "risk: must have exactly the fields"),
        ("rng.sample", torch.zeros(3, dtype=torch.uint8), "rng/sample: not a random generator"),
        ("episodes", [], "episodes: must have exactly the fields"),
        ("rewards.mean_square", -1.0, "rewards/mean_square: must be a finite number >= 0"),
        ("rewards.rollouts", "DELETE", "rewards: must have exactly the fields"),
        ("rewards", 3, "rewards: must have exactly the fields"),
    ],
)
def test_decode_names_the_field_it_refuses(path: str, value: object, match: str) -> None:
    tree, tensors = tampered(path, value)
    template = initial_training_state(risky_config(), 4)
    with pytest.raises(StateDecodeError, match=match):
        decode(template, tree, {k: v for k, v in tensors.items() if v is not None}, "training")


def test_a_state_saved_before_the_reward_moments_resumes_with_none_yet() -> None:
    """A field added since a checkpoint was written (metadata ``since``) may be absent: it keeps
    the template's value; every other field stays required."""
    tree, tensors = tampered("rewards", "DELETE")
    back = decode(initial_training_state(risky_config(), 4), tree, tensors, "training")
    assert back.rewards == RewardMoments() and back.counters.n_updates == 5


def test_a_state_for_a_model_without_risk_is_refused_by_one_with_it() -> None:
    cfg = risky_config()
    plain = initial_training_state(cfg, 4).replace(risk=None)
    with pytest.raises(StateDecodeError, match="training/risk"):
        roundtrip(plain, initial_training_state(cfg, 4))
    with pytest.raises(StateDecodeError, match="saved with a value where this model has none"):
        roundtrip(initial_training_state(cfg, 4), plain)


def test_invariants_types_cannot_say() -> None:
    state = initial_training_state(risky_config(), 4)
    check_invariants(state)
    assert state.risk is not None
    neg = dataclasses.replace(state.risk, length=torch.tensor([0, -1, 0, 0]))
    with pytest.raises(ValueError, match="risk/length"):
        check_invariants(state.replace(risk=neg))
    with pytest.raises(ValueError, match="rewards: the moments must be finite"):
        check_invariants(state.replace(rewards=RewardMoments(float("nan"), 1.0, 3)))
    bad = dataclasses.replace(state.scaling, scale=0.0)
    with pytest.raises(ValueError, match="scaling: scale"):
        check_invariants(state.replace(scaling=bad))


def test_format_1_checkpoint_is_migrated() -> None:
    """A checkpoint written by the previous format (before the training state existed) loads
    with its counters, λ, PID state, statistics and generator states (values recorded when it
    was written)."""
    expected = json.loads((FIXTURE / "checkpoint_v1_expected.json").read_text())
    model = DistributionalPPO.load(FIXTURE / "checkpoint_v1", rebuild_env=False)
    s = model.state
    assert s.risk is not None
    assert s.counters.num_timesteps == expected["num_timesteps"]
    assert s.counters.n_updates == expected["n_updates"]
    assert s.entropy.coef == expected["ent_coef"]
    assert s.entropy.schedule.update == expected["ent_update"]
    assert s.risk.lam == expected["lam"] and list(s.risk.recent) == expected["recent"]
    assert s.risk.pid.integral == expected["pid_integral"]
    assert s.risk.pid.steps == expected["pid_steps"]
    assert float(s.scaling.moments.mean) == expected["ret_mean"]
    assert s.scaling.scale == expected["ret_scale"]
    assert s.risk.acc.tolist() == expected["risk_acc"]
    assert s.risk.length.tolist() == expected["risk_length"]
    assert torch.rand(3, generator=s.rng.sample).tolist() == expected["sample_rng_next"]


def test_copied_weights_bring_their_statistics_and_reward_moments() -> None:
    """A PBT member that copies another's weights adopts what follows them (return statistics,
    the Sharpe utility's reward moments, counters) and keeps its own generators."""
    cfg = risky_config()
    src = played(initial_training_state(cfg, 4))
    own = initial_training_state(cfg, 4)
    got = adopted_state(own, SimpleNamespace(training=src))  # type: ignore[arg-type]
    assert got.rewards == src.rewards and got.scaling is src.scaling
    assert got.counters.n_updates == 5 and got.rng is own.rng
