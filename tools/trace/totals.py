"""Kernel totals: per kernel name, calls and summed duration; shares of the table's summed kernel time;
per category, summed time.

Durations are kept per name and summed with math.fsum (correctly rounded), so a total does not
depend on the order events were read in, nor on how a big file was split between processes.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable
from itertools import chain

from .records import KernelRow

# kernel name -> the durations (us) of its calls
NameDurations = dict[str, array]


def merge_durations(tables: Iterable[NameDurations]) -> NameDurations:
    """Several name tables (e.g. one per rank) as one new table."""
    merged: NameDurations = {}
    for table in tables:
        for name, durations in table.items():
            mine = merged.get(name)
            if mine is None:
                merged[name] = array("d", durations)
            else:
                mine.extend(durations)
    return merged


def kernel_rows(table: NameDurations, categorize: Callable[[str], str]) -> tuple[tuple[KernelRow, ...], float]:
    """Rows sorted by total time (descending, then name), and the table's summed kernel time."""
    kernel_time = math.fsum(chain.from_iterable(table.values()))
    rows = []
    for name, durations in table.items():
        total = math.fsum(durations)
        calls = len(durations)
        rows.append(
            KernelRow(
                name=name,
                category=categorize(name),
                calls=calls,
                total_us=total,
                mean_us=total / calls,
                share=(total / kernel_time) if kernel_time > 0 else None,
            )
        )
    rows.sort(key=lambda row: (-row.total_us, row.name))
    return tuple(rows), kernel_time


def category_totals(table: NameDurations, rows: Iterable[KernelRow], categories: list[str]) -> dict[str, float]:
    """Summed time per category, every category of the table present (0.0 when unused)."""
    names_by_category: dict[str, list[str]] = {category: [] for category in categories}
    for row in rows:
        names_by_category.setdefault(row.category, []).append(row.name)
    return {
        category: math.fsum(chain.from_iterable(table[name] for name in names))
        for category, names in names_by_category.items()
    }
