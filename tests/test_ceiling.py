"""The Amdahl ceiling: the published case from its raw inputs, and random cases against a simulation."""

import math
import random

import pytest

from agent.steps.ceiling import amdahl, ceiling_table, speedup_needed


def test_published_case_from_raw_inputs():
    # 40 decode steps: 3,830 ms of kernel time, the dominant kernel 2,412 ms, all others 1,418 ms, no idle.
    total, dominant = 3830.0, 2412.0
    assert total - dominant == 1418.0
    assert round(dominant / total, 2) == 0.63
    instant = amdahl(total, dominant)
    assert round(instant, 2) == 2.70
    assert round(23 * instant) == 62  # about 62 tok/s, short of 1,000
    assert 23 * instant < 1000
    assert speedup_needed(total, dominant, 1000 / 23) is None  # unreachable even with an instant kernel


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


def test_table_ends_with_the_instant_kernel_and_grows():
    rows = ceiling_table(3830.0, 2412.0, 23.0)
    assert rows[-1][0] == "instant"
    factors = [row[1] for row in rows]
    assert factors == sorted(factors)
    assert rows[-1][2] == pytest.approx(23 * 3830 / 1418)
