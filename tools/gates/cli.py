"""Human-facing gate table: `python -m agent gates --source DIR --sm 90|100|120 [--json]`.

Exit codes as tools/exitcodes.py (0 done, 2 bad input); errors are one ``error: ...`` line."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import time
from collections import Counter
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
    parser.add_argument("--json", action="store_true", help="print JSON instead of the text")
    parser.add_argument("--all", action="store_true",
                        help="list every gate and every unresolved test instead of the summary")
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


PASSES = {"yes": "passes", "if": "passes if its conditions hold", "no": "ruled out", "?": "unresolved"}
# the summary's lists stop here; --all has the rest
TOP = 8


class _Progress:
    """Files read and interpreted, on one line of a terminal's stderr, rewritten at most a few times a
    second and erased at the end; nothing when stderr is not a terminal (a log or a pipe keeps only
    what the command says)."""

    def __init__(self, stream):
        self.stream, self.on, self.last = stream, stream.isatty(), 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= 0.2:
            self.last = now
            self.stream.write(f"\rgates: {phase} {done}/{total} files\033[K")
            self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\r\033[K")
            self.stream.flush()


def passes_text(row) -> str:
    return "?" if row.passes is None else ("yes" if row.passes and row.definite else "if" if row.passes else "no")


def fold(text: str, width: int, indent: str = "", first: str = "") -> list[str]:
    """``text`` wrapped to ``width`` at spaces: a word (a path, an environment variable) is never cut,
    even when it alone is wider."""
    return textwrap.wrap(text, width=max(width, 20), initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


def clip(text: str, width: int) -> str:
    """Free text (a guarded path's source, a reason) cut to ``width`` with an ellipsis."""
    lead = text[: len(text) - len(text.lstrip())]
    text = lead + " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _helper(row) -> str:
    # both when a gate has both: the old table's "helper or env" hid the variables of a helper's gate
    return " ".join(filter(None, [row.helper, "env: " + ", ".join(row.env) if row.env else ""]))


def _allowed(row, result) -> str:
    return "env decides" if row.decided_by == "env" else sm_range(row.allows, result.sm_versions)


def table_lines(rows: list, result, sm: int, width: int) -> list[str]:
    """Every gate: where, kind, guard, helper or environment variables, allowed SMs, passes (the
    identifiers whole, folded onto a further line where the width ends), then the guarded path's
    source in what is left of the line, or on a line of its own when little is."""
    head = (f"{result.engine.get('package') or 'engine'} {result.engine.get('version') or ''} at {result.root}, "
            f"sm_{sm}: every gate").replace("  ", " ")
    where = min(max([len(f"{r.file}:{r.line}") for r in rows] + [5]), 40)
    out = fold(head, width) + fold("where, kind, guard, helper / env, allowed SMs, passes, guarded path", width)
    out.append("-" * min(width, 60))
    for r in rows:
        helper = _helper(r) or "-"
        lines = fold(f"{f'{r.file}:{r.line}':{where}} {r.kind:6} {'early exit' if r.role == 'exits' else 'enables':10} "
                     f"{helper} {_allowed(r, result)} {passes_text(r)}", width, "    ")
        room = width - len(lines[-1]) - 1
        if room >= 20 or len(" ".join(r.guarded.split())) <= room:
            lines[-1] += " " + clip(r.guarded, room)
        else:
            lines.append("    " + clip(r.guarded, width - 4))
        out += lines
    out += [""] + fold("passes: yes = the SM passes; if = passes when the listed conditions hold; no = ruled out; "
                       "? = unresolved", width)
    out += fold("guard: enables = the SMs whose test is true get the guarded path; early exit = the SMs whose test "
                "is true return/raise there (shut out), the others go on to the guarded path", width)
    out += ["", f"unresolved ({len(result.unresolved)}):"]
    for item in result.unresolved:
        out += fold(f"  {item.at}: {item.text} -- {item.reason}", width, "      ")
    return out


def summary_lines(rows: list, result, sm: int, width: int) -> list[str]:
    """What a first look needs, in a screen or two: the gates that rule this SM out, by directory; the
    environment variables that decide gates, named whole; the helpers most gates go through."""
    out = fold(f"{result.engine.get('package') or 'engine'} {result.engine.get('version') or ''} at {result.root}, "
               f"sm_{sm}: {len(rows)} capability gates in {result.files_interpreted} of {result.files_scanned} "
               f"files interpreted".replace("  ", " "), width)
    ruled_out = [r for r in rows if passes_text(r) == "no"]
    out += ["", f"ruled out on sm_{sm} ({len(ruled_out)} gates), by directory:"]
    out += _grouped(ruled_out, lambda r: r.file.rsplit("/", 1)[0] if "/" in r.file else ".", width)
    env = {}
    for r in rows:
        for name in r.env:
            env.setdefault(name, []).append(r)
    # every name, whole: which switches exist is what a reader looks for here
    ranked = sorted(env.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    out += ["", f"environment variables the gates read ({len(env)}), with their gates in ():"]
    if env:
        out += fold(", ".join(f"{name}({len(members)})" for name, members in ranked), width, "  ", "  ")
    helpers = {}
    for r in rows:
        if r.helper:
            helpers.setdefault(r.helper, []).append(r)
    out += ["", f"helpers the gates call ({len(helpers)}), by gates (at sm_{sm}: yes/if/no/?):"]
    out += _grouped(rows, None, width, groups=helpers, note=_tally)
    if result.unresolved:
        out += ["", f"unresolved ({len(result.unresolved)}), the first {min(TOP // 2, len(result.unresolved))}:"]
        for item in result.unresolved[: TOP // 2]:
            out.append("  " + clip(f"{item.at}: {item.text} -- {item.reason}", width - 2))
    return out


def _tally(rows: list) -> str:
    verdicts = Counter(passes_text(r) for r in rows)
    return "/".join(str(verdicts[v]) for v in PASSES)


def _fit(items: list[str], room: int) -> str:
    """As many of ``items`` (file:line) as fit in ``room``, each whole, and how many did not."""
    text = ""
    for count, item in enumerate(items):
        more = f", +{len(items) - count} more" if count else f"+{len(items)} more"
        candidate = f"{text}, {item}" if text else item
        rest = len(items) - count - 1
        if len(candidate) + (len(f", +{rest} more") if rest else 0) > room:
            return text + more if text else (more if len(more) <= room else "")
        text = candidate
    return text


def _grouped(rows: list, key, width: int, groups: dict | None = None, note=None) -> list[str]:
    """The TOP groups with the most gates, each on a line: its name whole, its count, and where its
    gates are (file:line, each whole, as many as fit); a line saying how many groups more."""
    if groups is None:
        groups = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    name_width = max([len(name) for name, _ in ranked[:TOP]] + [1])
    out = []
    for name, members in ranked[:TOP]:
        head = f"  {name:{name_width}} {len(members):4}  "
        extra = f"{note(members)}  " if note else ""
        places = [f"{r.file.rsplit('/', 1)[-1]}:{r.line}" for r in members]
        out.append((head + extra + _fit(places, width - len(head) - len(extra))).rstrip())
    if len(ranked) > TOP:
        out.append(f"  ... {len(ranked) - TOP} more ({sum(len(m) for _, m in ranked[TOP:])} gates): --all lists every gate")
    return out


def tie_lines(ties: list, result, width: int) -> list[str]:
    out = []
    for tie in ties:
        out += [""] + fold(f"kernel {tie.kernel} ({tie.kind}, {tie.defined_at}): reached={tie.reached} "
                           f"reachable={tie.reachable}", width, "  ")
        if tie.env_to_reach:
            out += fold("  reached with: " + ", ".join(f"{k}={'|'.join(v)}" for k, v in tie.env_to_reach.items()),
                        width, "    ")
        for alt in tie.alternatives:
            out.append(clip(f"  other SMs {sm_range(alt['sms'], result.sm_versions)} at {alt['at']} ({alt['test'][:60]}): "
                            f"{alt['names'][:1] or alt['text'][:60]}", width))
        for inst in tie.instead:
            out.append(clip(f"  this SM runs instead at {inst['at']}: {inst['names'][:1] or inst['text'][:60]}", width))
        for lever in tie.levers:
            out += fold(f"  lever {lever.get('env') or lever.get('flag')}: {lever}", width, "    ")
        for item in tie.unresolved:
            out.append(clip(f"  unresolved: {item}", width))
    return out


def count_lines(rows: list, result, sm: int, width: int, listed_all: bool) -> list[str]:
    """The counts the listing ends with: gates by verdict for this SM and by kind, and the unresolved."""
    verdicts = Counter(passes_text(r) for r in rows)
    kinds = Counter(r.kind for r in rows)
    out = [""] + fold(f"{len(rows)} gates at sm_{sm}: " + ", ".join(f"{PASSES[v]} {verdicts[v]}" for v in PASSES)
                      + "; by kind: " + ", ".join(f"{k} {kinds[k]}" for k in GATE_KINDS if kinds[k])
                      + f"; {len(result.unresolved)} tests unresolved", width)
    if not listed_all:
        out += fold("--all lists every gate; --json gives them all as data", width)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        root = resolve_source(args.source)
    except (SourceMissing, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    if args.sm not in SM_VERSIONS:
        print(f"error: --sm {args.sm} is not a known compute capability; one of {list(SM_VERSIONS)}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    told = _Progress(sys.stderr)
    try:
        result = scan(root, cuda=args.cuda, progress=told if told.on else None)
    finally:
        told.close()
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
    width = shutil.get_terminal_size(fallback=(100, 24)).columns
    lines = table_lines(rows, result, args.sm, width) if args.all else summary_lines(rows, result, args.sm, width)
    lines += tie_lines(ties, result, width) + count_lines(rows, result, args.sm, width, args.all)
    print("\n".join(lines))
    return exitcodes.DONE


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gates", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
