"""The planted delay's arithmetic: a GPU spin (``torch.cuda._sleep``) sized to a fraction of the step.

A calibration lever adds a known delay to every decode step, inside the captured graph, so that the
lever sweep can be checked against a change whose size is known. The delay is planned as a fraction
of the setting's own step (measured in the same run, without the delay), converted to the spin's
clock cycles at the rate measured on the box (the spin timed alone), then calibrated where it runs:
the step with the spin and the step without it are timed in turns, in the same graph form, the cycles
corrected once by what the spin really adds there (timed alone it reads longer than it adds inside a
graph, by its launch), and the pair timed again. The result reports what was planted inside the step,
not what was asked for. Pure functions: no torch.
"""

from __future__ import annotations

# Cycles of the spin used to measure the rate: ~0.5 ms at H200 clocks, long against launch overhead.
RATE_CYCLES = 1_000_000


def sleep_cycles(step_ms: float, frac: float, cycles_per_ms: float) -> int:
    """Spin cycles that take ``frac`` of a ``step_ms`` step at ``cycles_per_ms``; at least 1 for
    frac > 0. Raises ValueError on a non-positive step or rate, or a negative fraction."""
    if step_ms <= 0 or cycles_per_ms <= 0 or frac < 0:
        raise ValueError(f"sleep_cycles needs step_ms > 0, cycles_per_ms > 0, frac >= 0; got {step_ms}, "
                         f"{cycles_per_ms}, {frac}")
    if frac == 0:
        return 0
    return max(1, round(frac * step_ms * cycles_per_ms))


def corrected_cycles(cycles: int, target_ms: float, added_ms: float) -> int:
    """The spin's cycles scaled so that it adds ``target_ms`` where one of ``cycles`` added
    ``added_ms`` (the spin's time is linear in its cycles); ``cycles`` unchanged when it added
    nothing measurable (``added_ms`` <= 0: no basis for a correction)."""
    if cycles < 0 or target_ms < 0:
        raise ValueError(f"corrected_cycles needs cycles >= 0 and target_ms >= 0; got {cycles}, {target_ms}")
    if added_ms <= 0 or cycles == 0:
        return cycles
    return max(1, round(cycles * target_ms / added_ms))


def expected_ratio(delay_ms: float, step_ms: float) -> float:
    """The throughput ratio a delay of ``delay_ms`` added to each ``step_ms`` step gives:
    step / (step + delay) = 1 / (1 + delay / step)."""
    if step_ms <= 0 or delay_ms < 0:
        raise ValueError(f"expected_ratio needs step_ms > 0 and delay_ms >= 0; got {step_ms}, {delay_ms}")
    return 1.0 / (1.0 + delay_ms / step_ms)


def delay_report(planned_frac: float, undelayed_step_ms: float, cycles_per_ms: float, cycles: int,
                 delay_ms: float, alone_ms: float | None = None, where: str = "alone") -> dict:
    """What a run planted: the plan, the measured rate and spin, the realised fraction and the
    throughput ratio it should give against the same setting without it. ``delay_ms`` is what the
    spin adds to a step, measured ``where`` ("inside the graph", "after the eager step", or "alone"
    for the spin timed by itself); ``alone_ms`` the spin timed by itself, when that differs."""
    return {
        "planned_frac": planned_frac,
        "where": where,
        "alone_ms": alone_ms,
        "undelayed_step_ms": undelayed_step_ms,
        "cycles_per_ms": cycles_per_ms,
        "cycles": cycles,
        "delay_ms": delay_ms,
        "frac": delay_ms / undelayed_step_ms,
        "expected_ratio": expected_ratio(delay_ms, undelayed_step_ms),
    }
