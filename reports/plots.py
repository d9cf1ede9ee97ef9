"""The report's plots as PNG bytes: kernel shares, the lever sweep (ratios to the baseline with their intervals), the ceiling.

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


def lever_sweep(rows: list[dict[str, Any]], detectable: float | None, min_effect: float | None) -> bytes:
    """Each lever's throughput ratio to the baseline (baseline = 1) with its interval, on a log axis so
    that a 10x slowdown and a 10x speedup look alike and a ratio near 1 is not a sliver beside them;
    the band of changes the sweep could not have told from none (its smallest detectable effect); and
    beside each row the text the report's table gives it. ``rows``: name, ratio, low, high (None when
    the lever is not drawn), text, status (agent.steps.report.lever_rows)."""
    from matplotlib import ticker

    plt, fig, ax = _figure()
    fig.set_size_inches(WIDTH + 2, max(HEIGHT, 1.6 + 0.34 * (len(rows) + 1)))
    colors = {"moves up": "#228833", "moves down": "#ee6677", "changes the output": "#ccbb44"}
    # the baseline on top, the levers below it in the finding's order
    ys = list(range(len(rows), 0, -1))
    ax.plot([1.0], [len(rows) + 1], marker="D", color="#4477aa", linestyle="none")
    ax.axvline(1.0, color="#4477aa", linewidth=1)
    span = [1.0]
    for y, row in zip(ys, rows):
        if row["ratio"] is None:
            continue
        ax.barh([y], [row["ratio"] - 1.0], left=1.0, height=0.6, color=colors.get(row["status"], "#bbbbbb"))
        span.append(row["ratio"])
        if row["low"] is not None:
            ax.errorbar([row["ratio"]], [y], xerr=[[row["ratio"] - row["low"]], [row["high"] - row["ratio"]]],
                        color="black", capsize=3, linestyle="none")
            span += [row["low"], row["high"]]
    if detectable:
        ax.axvspan(1.0 / (1.0 + detectable), 1.0 + detectable, color="#ee6677", alpha=0.2, zorder=0,
                   label=f"smallest detectable effect {100 * detectable:.1f}%"
                         + (f" (min_effect {100 * min_effect:.3g}%)" if min_effect is not None else ""))
        span += [1.0 / (1.0 + detectable), 1.0 + detectable]
        ax.legend(loc="lower left", fontsize=8)
    low, high = min(span), max(span)
    ax.set_xscale("log")
    ax.set_xlim(low / 1.5, high * 1.5)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylim(0.3, len(rows) + 1.7)
    ax.set_yticks([len(rows) + 1] + ys, ["baseline = 1"] + [row["name"] for row in rows])
    # the table's own text, in a column right of the axis: drawn or not, every lever says what it got
    ax.text(1.02, len(rows) + 1, "reference", transform=ax.get_yaxis_transform(), va="center")
    for y, row in zip(ys, rows):
        ax.text(1.02, y, row["text"], transform=ax.get_yaxis_transform(), va="center",
                style="normal" if row["ratio"] is not None else "italic",
                color="black" if row["ratio"] is not None else "#666666")
    ax.set_xlabel("throughput / baseline (log scale)")
    ax.set_title("Lever sweep: ratio to the baseline, 95% intervals")
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
