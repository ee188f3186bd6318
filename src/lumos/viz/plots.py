"""matplotlib figures as inline SVG: the e-graph's size after each ruleset run, and the
search's progress (each candidate's time, the best so far)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from lumos.errors import LumosError


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise LumosError("lumos viz draws its plots with matplotlib, which is not installed "
                         "(pip install 'lumos[viz]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def egraph_svg(runs: Sequence[Any]) -> str:
    """E-nodes after each ruleset run (RulesetRun), one colour per ruleset, the stages
    and rounds along the x axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    names = list(dict.fromkeys(r.ruleset for r in runs))
    x = list(range(len(runs)))
    ax.plot(x, [r.enodes for r in runs], color="#999999", linewidth=1, zorder=1)
    for k, name in enumerate(names):
        pts = [(i, r.enodes) for i, r in enumerate(runs) if r.ruleset == name]
        ax.scatter(*zip(*pts, strict=True), s=18, color=f"C{k}", label=name, zorder=2)
    for i in range(1, len(runs)):
        if runs[i].stage != runs[i - 1].stage:
            ax.axvline(i - 0.5, color="#cccccc", linestyle="--", linewidth=0.8)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("ruleset run (dashed lines: stages of the schedule)")
    ax.set_ylabel("e-nodes")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return _svg(fig)


def search_svg(trials: Sequence[Any]) -> str:
    """Each measured candidate's time and the best so far against the candidate number;
    invalid and rejected candidates marked along the bottom."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    measured = [t for t in trials if t.outcome == "measured"]
    if measured:
        ax.scatter([t.index for t in measured], [t.seconds * 1e3 for t in measured], s=22,
                   color="C0", label="candidate", zorder=2)
        best = [t for t in trials if t.best is not None]
        ax.step([t.index for t in best], [t.best * 1e3 for t in best], where="post",
                color="C3", label="best so far", zorder=1)
        ax.set_yscale("log")
    for kind, color in (("invalid", "C1"), ("rejected", "#999999")):
        xs = [t.index for t in trials if t.outcome == kind]
        if xs:
            ax.scatter(xs, [min((t.seconds for t in measured), default=1e-3) * 1e3] * len(xs),
                       marker="x", color=color, label=kind, zorder=3)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("candidate (in the order measured)")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3, which="both")
    return _svg(fig)
