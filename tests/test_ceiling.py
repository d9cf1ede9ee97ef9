"""The Amdahl ceiling: the target's published case from its raw inputs, and random cases against a simulation."""

import math
import random

import pytest

from agent.config import load_target
from agent.steps.amdahl import SPEEDUPS, amdahl, ceiling_table, speedup_needed


def test_published_case_from_the_targets_raw_inputs():
    """The target's published case (its raw kernel times, tok/s and goal, read from the target file):
    short of the goal even with the dominant kernel instant, and speedup_needed says so."""
    target, _ = load_target("dsv4-flash")
    published = target.published
    total, dominant = published["kernel_time_ms"] + published.get("idle_ms", 0), published["dominant_ms"]
    durations = [("dominant", dominant), ("rest", total - dominant)]
    instant = amdahl(total, dominant)
    assert instant == pytest.approx(_simulated_speedup(durations, 0.0, "dominant", math.inf), rel=1e-12)
    factor = target.goal.output_tok_s / published["tok_s"]
    assert published["tok_s"] * instant < target.goal.output_tok_s
    assert speedup_needed(total, dominant, factor) is None


def _simulated_speedup(durations, idle, dominant, speedup):
    """Independent formula: rebuild the step from its events with the dominant kernel's events
    shortened, and compare the totals."""
    before = sum(d for _, d in durations) + idle
    after = sum(d / speedup if name == dominant else d for name, d in durations) + idle
    return before / after


def test_random_cases_match_a_simulation_of_the_events():
    rng = random.Random(20261130)
    for _ in range(500):
        names = [f"k{i}" for i in range(rng.randint(1, 12))]
        durations = [(rng.choice(names), rng.uniform(0.1, 500.0)) for _ in range(rng.randint(1, 300))]
        idle = rng.choice([0.0, rng.uniform(0.0, 2000.0)])
        dominant = rng.choice([name for name, _ in durations])
        speedup = rng.choice([1.0, 1.5, 2.0, 8.0, rng.uniform(1.0, 1000.0)])
        total = sum(d for _, d in durations) + idle
        part = sum(d for name, d in durations if name == dominant)
        assert amdahl(total, part, speedup) == pytest.approx(_simulated_speedup(durations, idle, dominant, speedup), rel=1e-9)
        # the instant-kernel limit is the supremum of the finite speedups
        if part < total:
            assert amdahl(total, part) == pytest.approx(total / (total - part), rel=1e-12)
            assert amdahl(total, part, 1e12) == pytest.approx(amdahl(total, part), rel=1e-6)


def test_speedup_needed_inverts_amdahl():
    rng = random.Random(7)
    for _ in range(200):
        total = rng.uniform(1, 1000)
        part = rng.uniform(total * 0.01, total * 0.99)
        factor = 1.0 + rng.uniform(0.0, 0.999) * (amdahl(total, part) - 1.0)
        s = speedup_needed(total, part, factor)
        assert amdahl(total, part, s) == pytest.approx(factor, rel=1e-9)


def test_whole_kernel_and_bad_inputs():
    assert math.isinf(amdahl(10.0, 10.0))
    assert amdahl(10.0, 0.0, 4.0) == 1.0
    with pytest.raises(ValueError):
        amdahl(10.0, 11.0)
    with pytest.raises(ValueError):
        amdahl(10.0, 5.0, 0.0)


def test_table_rows_match_a_simulation_and_end_with_the_instant_kernel():
    rng = random.Random(11)
    for _ in range(100):
        durations = [(rng.choice("abc"), rng.uniform(0.1, 50.0)) for _ in range(rng.randint(2, 60))]
        idle = rng.uniform(0.0, 100.0)
        dominant = durations[0][0]
        total = sum(d for _, d in durations) + idle
        part = sum(d for name, d in durations if name == dominant)
        tok_s = rng.uniform(1.0, 1000.0)
        rows = ceiling_table(total, part, tok_s)
        assert [row[0] for row in rows] == [f"{s:g}x" for s in SPEEDUPS] + ["instant"]
        for speedup, row in zip([*SPEEDUPS, math.inf], rows):
            expected = _simulated_speedup(durations, idle, dominant, speedup)
            assert row[1] == pytest.approx(expected, rel=1e-9)
            assert row[2] == pytest.approx(tok_s * expected, rel=1e-9)
        factors = [row[1] for row in rows]
        assert factors == sorted(factors)
