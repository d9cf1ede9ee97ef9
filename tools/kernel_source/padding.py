"""Programs that compute only padding heads: a deployment pads its head count per rank (64 where the
model has 16), and the programs along the grid's head axis past the real heads do no useful work."""

from __future__ import annotations

import math

from .grid_report import GridReport

_HEAD_NAMES = ("H", "h", "h_q", "num_heads", "nheads", "head_num", "num_q_heads", "n_heads", "heads", "num_head", "q_heads", "H_q")


def _head_axis(report: GridReport, head_symbol: str | None) -> tuple[int, str] | None:
    """(index, symbol) of the first grid axis counting ``head_symbol`` (else a usual head name)."""
    for index, axis in enumerate(report.grid_axes):
        for symbol in axis["units"]:
            if (head_symbol and symbol == head_symbol) or (not head_symbol and symbol in _HEAD_NAMES):
                return index, symbol
    return None


def padded_heads(report: GridReport, head_symbol: str | None, shapes: dict[str, int]) -> int:
    """The head count the grid was evaluated at: the head symbol's pinned shape, else its argument value."""
    found = _head_axis(report, head_symbol)
    if found is None:
        raise ValueError("no grid axis over heads found; name it with head_symbol")
    symbol = found[1]
    if symbol in shapes:
        return shapes[symbol]
    value = report.kernel_args.get(symbol, {}).get("value")
    if isinstance(value, int):
        return value
    raise ValueError(f"the padded head count ({symbol}) is not among the shapes")


def padded_programs(report: GridReport, real_heads: int, padded_heads: int, head_symbol: str | None = None) -> dict:
    """How many programs compute only padding heads (head index >= ``real_heads``), per config.

    The head axis is the grid axis whose expression is the head symbol or ``cdiv(head, K)``
    (K heads per program); a program holding real and padded heads counts as real.
    """
    found = _head_axis(report, head_symbol)
    if found is None:
        raise ValueError("no grid axis over heads found; name it with head_symbol")
    index, symbol = found
    axis = report.grid_axes[index]
    by_config: dict[str, dict] = {}
    for config in report.configs:
        per_program = axis.get("units_by_config", {}).get(config.label, {}).get(symbol)
        if per_program is None or config.grid is None or any(d is None for d in config.grid):
            by_config[config.label] = {"padding_programs": None, "programs": config.programs}
            continue
        extent = config.grid[index]
        padded_extent = -(-padded_heads // per_program)
        real_extent = -(-real_heads // per_program)
        others = math.prod(d for i, d in enumerate(config.grid) if i != index)
        padding = max(0, padded_extent - real_extent) * others
        by_config[config.label] = {
            "heads_per_program": per_program,
            "head_axis_extent": extent,
            "consistent": extent == padded_extent,  # the grid was evaluated at padded_heads
            "real_head_programs_on_axis": real_extent,
            "padding_programs": padding,
            "programs": config.programs,
            "padding_share": padding / config.programs if config.programs else None,
        }
    values = [v["padding_programs"] for v in by_config.values()]
    return {
        "head_axis": index,
        "head_symbol": symbol,
        "real_heads": real_heads,
        "padded_heads": padded_heads,
        "padding_programs": values[0] if values and all(v == values[0] for v in values) else None,
        "by_config": by_config,
    }

