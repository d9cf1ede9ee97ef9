"""The report's plots as PNG bytes: kernel shares, the lever sweep with its intervals, the ceiling.

Rendering is pinned (matplotlib version in pyproject.toml, fixed size, dpi and font, no metadata
stamp), so the same findings give the same bytes and a replay can compare them.
"""

from __future__ import annotations

import io
from typing import Any

WIDTH, HEIGHT, DPI = 8.0, 4.0, 100


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 9, "svg.hashsalt": "perf-investigator"})
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT), dpi=DPI)
    return plt, fig, ax


def _png(plt, fig) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def kernel_shares(kernels: list[dict[str, Any]], top: int = 10, title: str = "Kernel time share") -> bytes:
    plt, fig, ax = _figure()
    rows = kernels[:top][::-1]
    ax.barh([_short(k["name"]) for k in rows], [100 * k["share"] for k in rows], color="#4477aa")
    for position, k in enumerate(rows):
        ax.text(100 * k["share"], position, f" {100 * k['share']:.1f}%", va="center")
    ax.set_xlabel("share of kernel time (%)")
    ax.set_xlim(0, 110)
    ax.set_title(title)
    return _png(plt, fig)


def lever_sweep(baseline: float, detectable: float | None, settings: list[tuple[str, float | None, tuple[float, float] | None]],
                unit: str = "tok/s") -> bytes:
    """Median tok/s per setting with its interval (from the ratio's interval x the baseline), and
    the band of changes the sweep could not have told from none (its smallest detectable effect)."""
    plt, fig, ax = _figure()
    names = ["baseline"] + [name for name, _, _ in settings]
    values = [baseline] + [value if value is not None else 0.0 for _, value, _ in settings]
    colors = ["#4477aa"] + ["#bbbbbb" if value is None else "#66ccee" for _, value, _ in settings]
    ax.bar(names, values, color=colors)
    for position, (_, value, interval) in enumerate(settings, start=1):
        if value is None:
            ax.text(position, 0, "not run", ha="center", va="bottom", rotation=90)
        elif interval:
            ax.errorbar([position], [value], yerr=[[value - interval[0]], [interval[1] - value]], color="black", capsize=4)
    if detectable:
        ax.axhspan(baseline / (1 + detectable), baseline * (1 + detectable), color="#ee6677", alpha=0.2,
                   label=f"smallest detectable effect +/-{100 * detectable:.1f}%")
        ax.legend(loc="upper right")
    ax.set_ylabel(unit)
    ax.set_title("Lever sweep (medians, 95% intervals)")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return _png(plt, fig)


def ceiling(measured: float, bounds: list[tuple[str, float]], goal: float, unit: str = "tok/s") -> bytes:
    plt, fig, ax = _figure()
    labels = ["measured"] + [label for label, _ in bounds]
    values = [measured] + [value for _, value in bounds]
    ax.bar(labels, values, color=["#4477aa"] + ["#66ccee"] * len(bounds))
    ax.axhline(goal, color="#ee6677", linestyle="--", label=f"goal {goal:.0f} {unit}")
    for position, value in enumerate(values):
        ax.text(position, value, f"{value:.3g}", ha="center", va="bottom")
    ax.set_yscale("log")
    ax.set_ylabel(f"{unit} (log scale, projected)")
    ax.set_title("Amdahl ceiling against the goal")
    ax.legend(loc="upper left")
    return _png(plt, fig)
