"""Population summary plot (R-PBT-2): each member's score and hyperparameters over time, with
its exploits marked (the jump to the source's curve is where it copied a better member)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riskppo.config import Config
from riskppo.evaluation.plots import figure_png, new_figure
from riskppo.safefs import write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def population_figure(
    members: list[dict[str, Any]], history: list[dict[str, Any]], cfg: Config, metric: str
) -> Figure:
    """Rows: the score, then one row per tuned hyperparameter; one line per member vs steps.

    Failed intervals (``pbt_members.jsonl`` lines without ``step``) are marked ``x`` at the
    bottom of the score row; a member without a single finished interval has no line."""
    names = list(cfg.pbt.hyperparams)
    fig = new_figure(9, 2.4 * (1 + len(names)), dpi=None)
    axes = fig.subplots(1 + len(names), 1, sharex=True, squeeze=False)[:, 0]
    ids = sorted({e["member"] for e in members})
    colors = {m: f"C{i % 10}" for i, m in enumerate(ids)}
    for m in ids:
        rows = [e for e in members if e["member"] == m and "step" in e]
        failed = [e for e in members if e["member"] == m and "step" not in e]
        _member_lines(axes, names, rows, colors[m], f"m{m}")
        for e in failed:
            axes[0].plot(
                e.get("at_step") or 0,
                0.03,
                marker="x",
                ms=7,
                color=colors[m],
                transform=axes[0].get_xaxis_transform(),
                linestyle="none",
            )
    for ex in history:  # an exploit: the target restarts from the source at `step`
        for ax in axes:
            ax.axvline(ex["step"], color=colors.get(ex["member"], "k"), lw=0.6, ls=":", alpha=0.7)
    n_failed = sum("step" not in e for e in members)
    axes[0].set_ylabel(f"validation {metric}")
    axes[0].set_title(
        f"PBT population: {len(ids)} members, {len(history)} exploits (dotted), "
        f"{n_failed} failed intervals (x)"
    )
    if any("step" in e for e in members):
        axes[0].legend(ncol=min(len(ids), 8), fontsize=8, loc="best")
    for ax, name in zip(axes[1:], names):
        ax.set_ylabel(name.split(".")[-1])
        if cfg.pbt.hyperparams[name].log:
            ax.set_yscale("log")
    axes[-1].set_xlabel("environment steps per member")
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig


def _member_lines(
    axes: Any, names: list[str], rows: list[dict[str, Any]], color: str, label: str
) -> None:
    """One member's score and hyperparameter curves from its finished intervals (none: none)."""
    if not rows:
        return
    steps = [e["step"] for e in rows]
    score = [e["score"] if e.get("score") is not None else float("nan") for e in rows]
    axes[0].plot(steps, score, marker="o", ms=3, color=color, label=label)
    starts = [0, *steps[:-1]]  # round k used its hyperparameters from starts[k] to steps[k]
    for ax, name in zip(axes[1:], names):
        values = [e["hyperparams"][name] for e in rows]
        ax.step(starts + steps[-1:], values + values[-1:], where="post", color=color)


def plot_population(run_dir: Path) -> Path:
    """Write ``run_dir/pbt_summary.png`` from the run's logs; returns its path."""
    cfg = Config.from_yaml(run_dir / "config.yaml")
    members = read_jsonl(run_dir / "pbt_members.jsonl")
    history = read_jsonl(run_dir / "pbt_history.jsonl")
    summary = json.loads((run_dir / "pbt_summary.json").read_text())
    out = run_dir / "pbt_summary.png"
    figure = population_figure(members, history, cfg, summary["metric"])
    write_bytes_atomic(out, figure_png(figure))  # never through a link
    return out
