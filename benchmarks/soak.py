"""Soak test (R-REL-8): a long run and repeated learn()/close() cycles, sampling RSS and open fds.

    python benchmarks/soak.py --steps 100000 --cycles 20

Prints RSS (MB) and open file descriptors over time for the long run, and after each
learn/close cycle, plus the growth between the first and the last quarter (memory growth that
does not level off, or fds that keep rising, would be a leak).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from _common import BenchParser, positive_int, run_main


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    p = BenchParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=100_000)
    p.add_argument("--cycles", type=positive_int, default=20)
    p.add_argument("--cycle-steps", type=positive_int, default=2048)
    a = p.parse_args()

    import torch

    from riskppo import DistributionalPPO

    torch.set_num_threads(1)
    model = DistributionalPPO("riskppo/MaskedVelocityCartPole-v1", seed=0)
    samples: list[tuple[int, float, int]] = []

    def sample(m: DistributionalPPO, _metrics: object) -> bool:
        samples.append((m.num_timesteps, rss_mb(), open_fds()))
        return True

    model.learn(a.steps, callback=sample)
    model.close()
    q = max(len(samples) // 4, 1)
    first, last = samples[:q], samples[-q:]
    print(f"long run: {a.steps} steps, {len(samples)} updates")
    for steps, rss, fds in samples[:: max(len(samples) // 10, 1)]:
        print(f"  step {steps:>8,}  RSS {rss:7.1f} MB  fds {fds}")
    growth = statistics.mean(r for _, r, _ in last) - statistics.mean(r for _, r, _ in first)
    fd_growth = last[-1][2] - first[0][2]
    print(f"  RSS growth first→last quarter: {growth:+.1f} MB; fd change: {fd_growth:+d}")

    cycle_samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.cycles):  # each cycle writes TensorBoard + JSON lines files
            m = DistributionalPPO(
                "riskppo/MaskedVelocityCartPole-v1", seed=i, tensorboard_log=f"{tmp}/c{i}"
            )
            m.learn(a.cycle_steps)
            m.close()
            del m
            cycle_samples.append((rss_mb(), open_fds()))
    print(f"{a.cycles} learn/close cycles of {a.cycle_steps} steps:")
    for i, (rss, fds) in enumerate(cycle_samples):
        if i % 4 == 0 or i == a.cycles - 1:
            print(f"  cycle {i + 1:>2}  RSS {rss:7.1f} MB  fds {fds}")
    c_growth = cycle_samples[-1][0] - cycle_samples[len(cycle_samples) // 4][0]
    c_fd = cycle_samples[-1][1] - cycle_samples[0][1]
    print(
        f"  RSS growth cycle {len(cycle_samples) // 4 + 1}→{a.cycles}: {c_growth:+.1f} MB; "
        f"fd change: {c_fd:+d}"
    )


if __name__ == "__main__":
    sys.exit(run_main(main))
