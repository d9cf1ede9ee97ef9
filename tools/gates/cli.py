"""Human-facing gate table: `python -m agent gates --source DIR --sm 90|100|120 [--json]`.

Exit codes as tools/exitcodes.py (0 done, 2 bad input); errors are one ``error: ...`` line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools import exitcodes

from .fallbacks import fallbacks_for_kernels, tie_to_dict
from .model import SM_VERSIONS, _jsonable
from .scan import scan
from .source import SourceMissing, default_source
from .table import evaluate


GATE_KINDS = ("call", "attr", "const", "env", "assert")  # Gate.kind: how the architecture enters the test


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", type=Path, default=None, help="engine source tree (default: the installed sglang package)")
    parser.add_argument("--sm", type=int, required=True, help="compute capability as major*10+minor, e.g. 90, 100, 120")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--kernels", nargs="*", default=[], metavar="NAME", help="tie these kernel names to the gates")
    parser.add_argument("--kind", action="append", default=None, choices=GATE_KINDS,
                        help=f"only rows of this kind ({', '.join(GATE_KINDS)}); repeatable")
    parser.add_argument("--cuda", default=None, help="torch.version.cuda to assume (default: newer than any check)")


def resolve_source(source: Path | None) -> Path:
    """The tree to scan; raises SourceMissing / FileNotFoundError with a one-line message."""
    root = Path(source) if source is not None else default_source()
    if not root.is_dir():
        raise FileNotFoundError(f"--source {root} is not a directory")
    return root


def sm_range(sms: list, universe: list) -> str:
    """Compact text for a set of SMs: 'all', 'none', '>=100', '<=90', or the list."""
    sms = sorted(sms)
    if not sms:
        return "none"
    if sms == sorted(universe):
        return "all"
    if sms == [s for s in universe if s >= sms[0]]:
        return f">={sms[0]}"
    if sms == [s for s in universe if s <= sms[-1]]:
        return f"<={sms[-1]}"
    others = [s for s in universe if s not in sms]
    if len(others) < len(sms):
        return "all but " + ",".join(str(s) for s in others)
    return ",".join(str(s) for s in sms)


def run(args: argparse.Namespace) -> int:
    try:
        root = resolve_source(args.source)
    except (SourceMissing, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    if args.sm not in SM_VERSIONS:
        print(f"error: --sm {args.sm} is not a known compute capability; one of {list(SM_VERSIONS)}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    result = scan(root, cuda=args.cuda)
    rows = evaluate(result, args.sm)
    if args.kind:
        rows = [r for r in rows if r.kind in args.kind]
    ties = fallbacks_for_kernels(result, args.sm, args.kernels) if args.kernels else []
    if args.json:
        out = {
            "source": str(root),
            "sm": args.sm,
            "rows": _jsonable(rows),
            "unresolved": _jsonable(result.unresolved),
            "kernels": [tie_to_dict(t) for t in ties],
        }
        print(json.dumps(out, indent=1, sort_keys=True))
        return exitcodes.DONE
    print(f"{root}  sm_{args.sm}  ({len(rows)} gates, {result.files_interpreted}/{result.files_scanned} files interpreted)")
    header = f"{'where':64} {'kind':6} {'guard':10} {'helper':28} {'allowed SMs':22} {'passes':6} guarded path"
    print(header)
    print("-" * len(header))
    for row in rows:
        passes = "?" if row.passes is None else ("yes" if row.passes and row.definite else "if" if row.passes else "no")
        where = f"{row.file}:{row.line}"
        where = where if len(where) <= 64 else "..." + where[-61:]
        helper = row.helper or ("env: " + ",".join(row.env) if row.env else "")
        allowed = "env decides" if row.decided_by == "env" else sm_range(row.allows, result.sm_versions)
        guard = "early exit" if row.role == "exits" else "enables"
        print(
            f"{where:64} {row.kind:6} {guard:10} {helper[:28]:28} {allowed[:22]:22} "
            f"{passes:6} {row.guarded[:70]}"
        )
    print("\npasses: yes = the SM passes; if = passes when the listed conditions hold; no = ruled out; ? = unresolved")
    print("guard: enables = the SMs whose test is true get the guarded path; early exit = the SMs whose test is true "
          "return/raise there (shut out), the others go on to the guarded path")
    print(f"\nunresolved ({len(result.unresolved)}):")
    for item in result.unresolved:
        print(f"  {item.at}: {item.text} -- {item.reason}")
    for tie in ties:
        print(f"\nkernel {tie.kernel} ({tie.kind}, {tie.defined_at}): reached={tie.reached} reachable={tie.reachable}")
        if tie.env_to_reach:
            print("  reached with: " + ", ".join(f"{k}={'|'.join(v)}" for k, v in tie.env_to_reach.items()))
        for alt in tie.alternatives:
            print(f"  other SMs {sm_range(alt['sms'], result.sm_versions)} at {alt['at']} ({alt['test'][:60]}): {alt['names'][:1] or alt['text'][:60]}")
        for inst in tie.instead:
            print(f"  this SM runs instead at {inst['at']}: {inst['names'][:1] or inst['text'][:60]}")
        for lever in tie.levers:
            print(f"  lever {lever.get('env') or lever.get('flag')}: {lever}")
        for item in tie.unresolved:
            print(f"  unresolved: {item}")
    return exitcodes.DONE


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gates", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
