"""Where the test suite's CPU goes: ``python -m scripts.suite_cpu FILE [--top N]`` over the JSON lines that
``PERF_INVESTIGATOR_TEST_CPU=FILE make test`` writes (tests/conftest.py): each test's CPU seconds (its
waited-for children included) and each shared investigation's, the largest first, then per file and in all.
On a 2-core machine the suite cannot take less wall time than half its CPU seconds. Not counted: what the SSH
tests' box runs under sshd (its processes are sshd's children, not the test's)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def _s(seconds: float | None) -> str:
    return f"{seconds:8.1f}" if seconds is not None else f"{'-':>8}"  # a run recorded before costs were kept


def summary(lines: list[dict], top: int) -> str:
    tests = [r for r in lines if "test" in r]
    shared = [r for r in lines if "shared" in r]
    per_file: dict[str, float] = defaultdict(float)
    for r in tests:
        per_file[r["test"].split("::", 1)[0]] += r["cpu_s"]
    # A shared run a test's fixture built is in that test's CPU already; the background builders' are not
    total = sum(r["cpu_s"] for r in tests) + sum(r["cpu_s"] or 0 for r in shared if r.get("built_by") != "test")
    out = [f"CPU in all: {total:,.0f} s ({len(tests)} tests, {len(shared)} shared investigations): "
           f"at least {total / 2:,.0f} s of wall time on 2 cores", "", "shared investigations (cpu s, wall s):"]
    out += [f"  {_s(r['cpu_s'])} {_s(r['wall_s'])}  {r['shared']}" + (" (built by a test: in its CPU below)"
                                                                     if r.get("built_by") == "test" else "")
            for r in sorted(shared, key=lambda r: -(r["cpu_s"] or 0))]
    out += ["", f"the {top} costliest tests (cpu s, wall s):"]
    out += [f"  {r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['test']}" for r in sorted(tests, key=lambda r: -r["cpu_s"])[:top]]
    out += ["", f"the {top} costliest files (cpu s):"]
    out += [f"  {cpu:8.1f}  {name}" for name, cpu in sorted(per_file.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.suite_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    lines = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    print(summary(lines, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
