"""One seed, one model: the same weights whatever torch's thread count was before the model was
built (the orthogonal initialisation's QR depends on it), at initialisation and after training."""

from __future__ import annotations

import pytest
import torch

from riskppo import DistributionalPPO

# 64×64 layers: small enough to be fast, large enough that the QR of their orthogonal
# initialisation splits its work by thread (16×16 comes out the same on 1 and 2 threads)
TINY = dict(n_envs=2, n_steps=16, batch_size=32, n_epochs=2, lstm_hidden_size=64, net_arch=[64])


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _weights(model: DistributionalPPO) -> list[torch.Tensor]:
    return [q.detach().clone() for q in model.policy.parameters()]


def _assert_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    worst = max(float((x - y).abs().max()) for x, y in zip(a, b))
    assert all(torch.equal(x, y) for x, y in zip(a, b)), f"max |Δw| = {worst:.3g}"


def test_same_seed_same_weights_after_the_thread_count_changed(restore_threads):
    """``num_threads: 1`` holds from construction on: a model built while torch ran 2 threads
    and one built after a training call left it at 1 start and stay bit-identical."""
    steps = 2 * TINY["n_envs"] * TINY["n_steps"]  # two updates
    torch.set_num_threads(2)  # e.g. torch's default on another machine, or another model's
    first = DistributionalPPO("CartPole-v1", seed=0, num_threads=1, **TINY)
    assert torch.get_num_threads() == 1
    init_first = _weights(first)
    first.learn(steps)
    second = DistributionalPPO("CartPole-v1", seed=0, num_threads=1, **TINY)
    _assert_identical(init_first, _weights(second))
    second.learn(steps)
    _assert_identical(_weights(first), _weights(second))
    first.close()
    second.close()


def test_num_threads_none_leaves_the_thread_count_alone(restore_threads):
    torch.set_num_threads(2)
    model = DistributionalPPO("CartPole-v1", seed=0, num_threads=None, **TINY)
    assert torch.get_num_threads() == 2
    model.close()
