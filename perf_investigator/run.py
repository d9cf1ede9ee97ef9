"""``Run``: a finished investigation's results as pandas DataFrames, read from its run directory's
findings (``runs/<id>/findings/NN-step.json``, the records the report renders from).

Nothing is re-measured or re-derived: every number is the finding's own, so the levers table holds the
numbers of the report's "Lever sweep" table and of the levers finding's ``numbers``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from schema.finding import Finding, StepName

FINDING_COLUMNS = ["index", "step", "verdict", "headline", "labels"]
NUMBER_COLUMNS = ["finding", "step", "key", "value", "unit", "label"]
LEVER_COLUMNS = ["lever", "status", "reason", "tok_s", "step_ms", "ratio", "ratio_low", "ratio_high", "runs",
                 "failed_runs", "pairs", "interpreted", "comparable", "output_ok", "output_error", "planted_as_expected"]
BASELINE = "baseline"


class Run:
    """One run directory (``runs/<id>``, a shipped example or a replay), read-only.

    FileNotFoundError when the directory has no ``findings/`` folder; pydantic's ValidationError
    when a finding file is not a finding.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        folder = self.path / "findings"
        if not folder.is_dir():
            raise FileNotFoundError(f"{self.path}: no findings/ folder (not a run directory?)")
        self._records = [Finding.model_validate(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]

    @property
    def records(self) -> list[Finding]:
        """The findings as records (schema.finding.Finding), in step order."""
        return list(self._records)

    def finding(self, step: StepName) -> Finding:
        """The finding of one step ("levers", "profile", ...); KeyError when the run has none."""
        found = [f for f in self._records if f.step == step]
        if not found:
            raise KeyError(f"{self.path}: no {step} finding (steps: {', '.join(f.step for f in self._records)})")
        return found[-1]

    def findings(self) -> pd.DataFrame:
        """One row per finding, in step order. Columns: index (int): its place in the run; step: the
        step that wrote it; verdict: the step's verdict word; headline: its one-line result;
        labels: how its numbers must be read ("stand-in", "cpu-interpreter", "what-if", "failed"),
        comma-separated ("" when none)."""
        rows = [[f.index, f.step, f.verdict, f.headline, ", ".join(f.labels)] for f in self._records]
        return pd.DataFrame(rows, columns=FINDING_COLUMNS).astype({"index": "int64"})

    def numbers(self) -> pd.DataFrame:
        """Every number the findings state, one row each. Columns: finding: its file's stem
        ("02-levers"); step; key: the number's name in the finding; value: as stated (a float, int,
        str or None: object dtype); unit: its unit ("tok/s", "ms", "x", "fraction"...); label: what
        it is, in words."""
        rows = [[f.stem, f.step, key, number.value, number.unit, number.label]
                for f in self._records for key, number in f.numbers.items()]
        return pd.DataFrame(rows, columns=NUMBER_COLUMNS)

    def levers(self) -> pd.DataFrame:
        """The lever sweep: the baseline first (lever "baseline", status "reference"), then each lever
        of the target in its order, tried or not.

        Columns: lever: its name; status: "reference", "moves up", "moves down", "no change detected",
        "not tried", "failed", "not comparable", "changes the output"; reason: why not tried / failed
        / not comparable, else None; tok_s (float, output tokens/s): the median run's throughput, as
        the run states it (projected to the model's layer count when fewer layers ran: see the
        levers finding's headline); step_ms (float, ms): the median run's decode step (layers run);
        ratio (float, x): lever tok/s over baseline tok/s, paired by round (NaN for the baseline);
        ratio_low, ratio_high (float, x): its 95% interval; runs (int): timed runs (warm-ups left
        out); failed_runs (int); pairs (Int64): rounds paired with a baseline run; interpreted
        (boolean): Triton ran under the CPU interpreter; comparable (boolean): measured the same way
        as the baseline; output_ok (boolean): outputs match the baseline's within the target's
        tolerance; output_error (float, fraction): the median row's norm-relative difference;
        planted_as_expected (boolean): for a planted calibration lever, whether it came out as
        planted. NaN / <NA> where a lever has no such number (not tried, failed).
        """
        data = self.finding("levers").data
        rows = [_baseline_row(data["baseline"])] + [_lever_row(lever) for lever in data["levers"]]
        return pd.DataFrame(rows, columns=LEVER_COLUMNS).astype({
            **{c: "float64" for c in ("tok_s", "step_ms", "ratio", "ratio_low", "ratio_high", "output_error")},
            **{c: "Int64" for c in ("runs", "failed_runs", "pairs")},
            **{c: "boolean" for c in ("interpreted", "comparable", "output_ok", "planted_as_expected")},
        })


def _baseline_row(baseline: dict) -> list:
    output = baseline.get("output") or {}
    return [BASELINE, "reference", None, baseline.get("tok_s"), baseline.get("step_ms"), None, None, None,
            len(baseline.get("run_ms") or []), baseline.get("failed_runs"), None, baseline.get("interpreted"), True,
            output.get("ok"), output.get("error"), None]


def _lever_row(lever: dict) -> list:
    low, high = lever.get("interval") or (None, None)
    output = lever.get("output") or {}
    return [lever["name"], lever["status"], lever.get("reason"), lever.get("tok_s"), lever.get("step_ms"),
            lever.get("ratio"), low, high, lever.get("runs"), lever.get("failed_runs"), lever.get("pairs"),
            lever.get("interpreted"), lever.get("comparable"), output.get("ok"), output.get("error"),
            (lever.get("planted") or {}).get("as_expected")]
