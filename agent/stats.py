"""Lever statistics: medians, ratio intervals and verdicts from per-run step samples.

A sweep runs the baseline (A) and each lever (B, C, ...) interleaved, a baseline run then the
levers each round (``A B C``, or ``A B A C``), after a warm-up run that is discarded; each lever run
is paired with the latest baseline run of its round before it. Runs, not step samples, are the unit of independence: each
run is reduced to the median of its step samples (its *run median*) and only run medians enter
the statistics. Step samples within one process are correlated (same compiled kernels, same
allocation, same clocks), so treating them as independent would make intervals far too narrow.

Every ratio here is a **throughput ratio**: tok/s of the other setting over tok/s of the baseline,
i.e. baseline step time / other step time (> 1: the other setting is faster). Intervals are
t-intervals on log ratios (a ratio's error is multiplicative), exponentiated back.

Pure functions of their arguments: no clock, no randomness, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import fmean, median, stdev

BASELINE = "baseline"


@dataclass(frozen=True)
class Run:
    """One engine run of a sweep, in the order the sweep ran it.

    ``samples`` are the run's step times in ms (None when the run failed); ``warmup`` marks the
    discarded first run(s)."""

    setting: str
    samples: tuple[float, ...] | None
    round: int = 0
    warmup: bool = False

    @property
    def step_ms(self) -> float | None:
        """The run median: the one number per run the statistics use."""
        return median(self.samples) if self.samples else None


@dataclass(frozen=True)
class Interval:
    """A throughput ratio (other / baseline tok/s) with its confidence interval.

    ``low``/``high`` are None when the data give no interval (one pair, no spread estimate); ``note``
    says why, or flags a degenerate interval (zero spread)."""

    ratio: float | None
    low: float | None
    high: float | None
    n: int
    confidence: float
    note: str = ""

    def excludes_no_change(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 1.0 or self.high < 1.0)

    def covers(self, ratio: float) -> bool:
        return self.low is not None and self.high is not None and self.low <= ratio <= self.high


@dataclass(frozen=True)
class SettingStats:
    """One setting's runs in a sweep: run medians (ms, in run order, warm-up excluded), how many of
    its runs failed, the median of the run medians, and (levers only) its paired ratio interval."""

    setting: str
    run_ms: list[float]
    failed: int
    median_ms: float | None
    interval: Interval | None = None
    unpaired: int = 0  # successful runs whose neighbouring baseline run failed


@dataclass(frozen=True)
class Sweep:
    """The statistics of one sweep.

    ``run_log_sd`` is the sample standard deviation of the log run medians of the baseline (its
    run-to-run spread, ``run_log_df`` degrees of freedom); ``smallest_detectable_effect`` is
    documented at :func:`smallest_detectable_effect`."""

    baseline: SettingStats
    levers: dict[str, SettingStats]
    rounds: int
    confidence: float
    min_effect: float
    run_log_sd: float | None
    run_log_df: int
    smallest_detectable_effect: float | None
    warmup_ms: list[float | None] = field(default_factory=list)


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (df > 0), by bisection on
    its CDF (regularized incomplete beta); accurate to ~1e-10."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betainc(0.5 * df, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (continued fraction, modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / (c if abs(c) > tiny else tiny)
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0) / a


def _t_interval(values: list[float], confidence: float) -> Interval:
    """exp of a t-interval on the mean of log ratios ``values``."""
    n = len(values)
    if n == 0:
        return Interval(None, None, None, 0, confidence, "no paired runs")
    mean = fmean(values)
    if n == 1:
        return Interval(math.exp(mean), None, None, 1, confidence, "one round: no run-to-run spread, no interval")
    sd = stdev(values)
    note = "zero spread between rounds: the interval is a point" if sd == 0.0 else ""
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, confidence, note)


def paired_interval(pairs: list[tuple[float, float]], confidence: float) -> Interval:
    """Throughput ratio other/baseline from ``(baseline_ms, other_ms)`` run-median pairs (one pair a
    round): a t-interval on the per-round log ratios log(baseline_ms / other_ms), df = pairs - 1.
    One pair gives a point without interval; identical log ratios give a zero-width interval."""
    return _t_interval([math.log(b / o) for b, o in pairs], confidence)


def ratio_interval(base_ms: list[float], other_ms: list[float], confidence: float,
                   log_sd: float | None = None, df: int | None = None) -> Interval:
    """Throughput ratio other/baseline from two unpaired sets of run medians (ms), e.g. a
    prediction's setting measured once and its rewrite measured once.

    Point: exp(mean log base - mean log other). With two or more runs on each side, a Welch
    t-interval on the log run medians. Otherwise the run-to-run spread must come from elsewhere:
    ``log_sd`` (the standard deviation of a log run median, e.g. the lever sweep's
    ``run_log_sd``) with its ``df``; the interval is then mean difference +/- t(df) x log_sd x
    sqrt(1/n_base + 1/n_other). Without either, the point comes back with no interval and a note.
    """
    if not base_ms or not other_ms:
        return Interval(None, None, None, 0, confidence, "no runs on one side")
    lb, lo = [math.log(v) for v in base_ms], [math.log(v) for v in other_ms]
    diff = fmean(lb) - fmean(lo)
    nb, no = len(lb), len(lo)
    if nb >= 2 and no >= 2:
        vb, vo = stdev(lb) ** 2 / nb, stdev(lo) ** 2 / no
        se = math.sqrt(vb + vo)
        if se == 0.0:
            return Interval(math.exp(diff), math.exp(diff), math.exp(diff), nb + no, confidence,
                            "zero spread on both sides: the interval is a point")
        welch_df = (vb + vo) ** 2 / ((vb ** 2 / (nb - 1) if vb else 0.0) + (vo ** 2 / (no - 1) if vo else 0.0))
        half = t_quantile(0.5 + confidence / 2, welch_df) * se
        return Interval(math.exp(diff), math.exp(diff - half), math.exp(diff + half), nb + no, confidence)
    if log_sd is None or not df:
        return Interval(math.exp(diff), None, None, nb + no, confidence,
                        "a single run on one side and no run-to-run spread given: no interval")
    half = t_quantile(0.5 + confidence / 2, df) * log_sd * math.sqrt(1 / nb + 1 / no)
    return Interval(math.exp(diff), math.exp(diff - half), math.exp(diff + half), nb + no, confidence,
                    f"spread from elsewhere: log sd {log_sd:.3g}, {df} degrees of freedom")


def smallest_detectable_effect(run_log_sd: float | None, rounds: int, confidence: float, min_effect: float) -> float | None:
    """The smallest throughput change (a fraction, e.g. 0.03 = 3%) this sweep can call a move.

    Exactly: max(min_effect, exp(h) - 1), where h = t(confidence, rounds - 1) x sqrt(2) x
    run_log_sd / sqrt(rounds) is the half-width of the paired interval a lever would get if its
    runs spread like the baseline's (a per-round log ratio of two independent runs has variance
    2 x run_log_sd^2). A lever whose true effect is this size sits on the detection boundary: it
    is called a move in about half of such sweeps; about twice this size is detected nearly always.
    None when it cannot be stated (fewer than two rounds, or no baseline spread)."""
    spread = spread_effect(run_log_sd, rounds, confidence)
    return None if spread is None else max(min_effect, spread)


def spread_effect(run_log_sd: float | None, rounds: int, confidence: float) -> float | None:
    """The spread's part of the smallest detectable effect: exp(h) - 1 with h the paired
    half-width above, before the ``min_effect`` floor (which of the two sets the smallest
    detectable effect is what a report says). None when it cannot be stated."""
    if run_log_sd is None or rounds < 2:
        return None
    return math.expm1(t_quantile(0.5 + confidence / 2, rounds - 1) * math.sqrt(2.0) * run_log_sd / math.sqrt(rounds))


def speed_verdict(interval: Interval | None, min_effect: float) -> str:
    """"moves up" / "moves down" only when the interval excludes no change (1.0) AND the point
    passes ``min_effect`` (symmetric in log: up at ratio >= 1 + min_effect, down at ratio <=
    1 / (1 + min_effect)); otherwise "no change detected" (also when there is no interval)."""
    if interval is None or interval.ratio is None or not interval.excludes_no_change():
        return "no change detected"
    if interval.low > 1.0 and interval.ratio >= 1.0 + min_effect:
        return "moves up"
    if interval.high < 1.0 and interval.ratio <= 1.0 / (1.0 + min_effect):
        return "moves down"
    return "no change detected"


def analyze_sweep(runs: list[Run], confidence: float, min_effect: float) -> Sweep:
    """Statistics of a sweep from its runs in the order they ran.

    Warm-up runs are dropped. Each lever run is paired with the latest baseline run before it in
    the same round when that run succeeded (the ``A`` of its round, or of its ``A L`` slot); a lever
    run whose baseline run failed, or that has none in its round, counts as ``unpaired`` and enters
    the lever's median but not its interval. Failed runs
    (``samples`` None) are counted, never silently dropped. The baseline's median is the median
    of all its run medians."""
    kept = [r for r in runs if not r.warmup]
    base_ms = [r.step_ms for r in kept if r.setting == BASELINE and r.step_ms is not None]
    base_failed = sum(1 for r in kept if r.setting == BASELINE and r.step_ms is None)
    lever_names = list(dict.fromkeys(r.setting for r in kept if r.setting != BASELINE))
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in lever_names}
    unpaired = dict.fromkeys(lever_names, 0)
    latest: Run | None = None  # the latest non-warm-up baseline run, successful or not
    for run in runs:
        if run.warmup:
            continue
        if run.setting == BASELINE:
            latest = run
            continue
        if run.step_ms is None:
            continue
        if latest is not None and latest.round == run.round and latest.step_ms is not None:
            pairs[run.setting].append((latest.step_ms, run.step_ms))
        else:
            unpaired[run.setting] += 1
    levers = {}
    for name in lever_names:
        ms = [r.step_ms for r in kept if r.setting == name and r.step_ms is not None]
        failed = sum(1 for r in kept if r.setting == name and r.step_ms is None)
        levers[name] = SettingStats(name, ms, failed, median(ms) if ms else None,
                                    paired_interval(pairs[name], confidence), unpaired[name])
    logs = [math.log(v) for v in base_ms]
    run_log_sd = stdev(logs) if len(logs) >= 2 else None
    rounds = max((r.round for r in kept), default=0)
    return Sweep(
        baseline=SettingStats(BASELINE, base_ms, base_failed, median(base_ms) if base_ms else None),
        levers=levers, rounds=rounds, confidence=confidence, min_effect=min_effect,
        run_log_sd=run_log_sd, run_log_df=max(len(logs) - 1, 0),
        smallest_detectable_effect=smallest_detectable_effect(run_log_sd, rounds, confidence, min_effect),
        warmup_ms=[r.step_ms for r in runs if r.warmup],
    )


def row_errors(base: dict, other: dict) -> list[float]:
    """Per output row (one a request): the larger of its projections' norm-relative difference and
    its norm's relative difference, between two output sketches. Raises ValueError when the
    sketches are not of the same rows and directions."""
    pb, po = base["projections"], other["projections"]
    if (base.get("directions"), base.get("seed")) != (other.get("directions"), other.get("seed")) or \
            [len(r) for r in pb] != [len(r) for r in po]:
        raise ValueError("output sketches of different rows or directions cannot be compared")
    errors = []
    for rb, ro, nb, no in zip(pb, po, base["row_norms"], other["row_norms"]):
        diff = math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(rb, ro)))
        scale = math.sqrt(math.fsum(x * x for x in rb))
        proj = diff / scale if scale else (0.0 if diff == 0 else math.inf)
        norm = abs(no - nb) / nb if nb else (0.0 if no == nb else math.inf)
        errors.append(max(proj, norm))
    return errors


def output_error(base: dict, other: dict) -> float:
    """Norm-relative difference of two output sketches (``output_sketch`` of the reference
    engine): the larger of ||P_other - P_base|| / ||P_base|| over all rows' projections and the
    largest relative difference of a row norm. Raises ValueError when the sketches are not of the
    same rows and directions (they cannot be compared)."""
    pb, po = base["projections"], other["projections"]
    if (base.get("directions"), base.get("seed")) != (other.get("directions"), other.get("seed")) or \
            [len(r) for r in pb] != [len(r) for r in po]:
        raise ValueError("output sketches of different rows or directions cannot be compared")
    diff = math.sqrt(math.fsum((x - y) ** 2 for rb, ro in zip(pb, po) for x, y in zip(rb, ro)))
    scale = math.sqrt(math.fsum(x * x for row in pb for x in row))
    proj = diff / scale if scale else (0.0 if diff == 0 else math.inf)
    norms = [abs(o - b) / b if b else (0.0 if o == b else math.inf)
             for b, o in zip(base["row_norms"], other["row_norms"])]
    return max([proj] + norms)
