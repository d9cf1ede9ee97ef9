"""Command line: parse, hand to the runner or a tool's CLI, print the outcome. Exit 0 done, 1 failure, 2 bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_RUNS = Path(os.environ.get("PERF_INVESTIGATOR_RUNS", "runs"))


def _box(args):
    from tools.box import LocalBox

    if args.box != "local":
        raise SystemExit(_fail(f"--box {args.box}: only 'local' is built so far (SSH boxes come later)", 2))
    return LocalBox(python=args.box_python)


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _ask(question: dict) -> str | None:
    """Prompt on the terminal for the options step's decision."""
    print("\nOptions:", file=sys.stderr)
    for option in question["options"]:
        offered = "offered" if option["offered"] else "not offered"
        bound = option["upper_x"]
        print(f"  {option['name']:<16} {offered:<12} bound {bound:.3g}x  try here: "
              f"{'yes' if option['can_try_here'] else 'no'}  ({option['why']})", file=sys.stderr)
    choices = "/".join(question["choices"])
    while True:
        try:
            answer = input(f"decide [{choices}] (auto -> {question['auto']}): ").strip()
        except EOFError:
            return None
        if answer in question["choices"]:
            return answer
        print(f"  please answer one of {choices}", file=sys.stderr)


def cmd_investigate(args) -> int:
    from agent import runner
    from agent.progress import make_progress

    if args.engine not in (None, "reference"):
        return _fail(f"--engine {args.engine}: only the embedded reference engine is built so far", 2)
    if not args.resume and not args.target:
        return _fail("investigate needs a TARGET (or --resume RUN)", 2)
    box = _box(args)
    ask = _ask if sys.stdin.isatty() and not args.decide else None
    progress = make_progress()
    if args.resume:
        outcome = runner.resume(Path(args.resume), box, args.decide, ask, progress)
    else:
        outcome = runner.investigate(args.target, Path(args.runs_dir), box, args.decide, ask, progress,
                                     run_id=args.run_id, argv=sys.argv[1:], budget=args.budget)
    getattr(progress, "close", lambda: None)()
    return _report(outcome)


def _report(outcome) -> int:
    if outcome.exit_code == 0:
        print(outcome.message)
        if outcome.details.get("headline"):
            print(outcome.details["headline"])
    else:
        print(f"error: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


def cmd_replay(args) -> int:
    from agent import runner
    from agent.progress import make_progress

    return _report(runner.replay(Path(args.run), Path(args.out) if args.out else None, make_progress()))


def cmd_report(args) -> int:
    from agent import runner
    from agent.rundir import RunDirError
    from agent.runlog import CorruptLog

    try:
        text = runner.render(Path(args.run))
    except (RunDirError, CorruptLog, StopIteration) as exc:
        return _fail(str(exc) or f"{args.run}: not a finished run", 2)
    if args.out:
        Path(args.out).write_text(text)
        print(args.out)
    else:
        sys.stdout.write(text)
    return 0


def cmd_runs(args) -> int:
    from agent import runner

    rows = runner.list_runs(Path(args.runs_dir))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs under {args.runs_dir}")
        return 0
    print(f"{'status':<18} {'findings':>8}  {'started':<27} run")
    for row in rows:
        print(f"{row['status']:<18} {row.get('findings', '-'):>8}  {row.get('started', '-'):<27} {row['path']}")
    return 0


def cmd_validate(args) -> int:
    from agent.config import TargetError, load_target

    try:
        target, path = load_target(args.target)
    except TargetError as exc:
        return _fail(str(exc), 2)
    d = target.deployment
    print(f"{path}: valid. goal {target.goal.output_tok_s:g} tok/s at concurrency {target.goal.concurrency} "
          f"(step budget {target.goal.step_budget_ms:.3g} ms); {target.model.name}: {target.model.layers} layers, "
          f"{target.model.heads} heads ({d.heads_per_rank(target.model.heads)} per rank at TP{d.tp}, kernel launched with "
          f"{d.kernel_heads(target.model.heads)}); {d.gpus}x {d.gpu} sm_{d.sm}, {d.sm_count} SMs; {len(target.levers)} levers")
    return 0


TOOL_COMMANDS = {
    "trace": ("tools.trace.cli", "kernel table of PyTorch-profiler traces (--by-op: kernel time by launching frame)"),
    "grid": ("tools.kernel_source.cli", "a kernel's launch grid, loops and resources from its source"),
    "gates": ("tools.gates.cli", "capability gates of an engine source tree for an SM version"),
}


def _run_tool_command(name: str, argv: list[str]) -> int:
    """A tool's own CLI, imported only when asked for."""
    import importlib

    module_name, help_text = TOOL_COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"python -m agent {name}", description=help_text)
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent", description="Investigate why an LLM deployment is far from its throughput goal.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("investigate", help="run an investigation (or resume one)")
    p.add_argument("target", nargs="?", help="target name (agent/targets/NAME.yaml) or path to a target YAML")
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run from its checkpoint")
    p.add_argument("--decide", choices=["auto", "splitk", "stop"], help="answer the options step without a prompt")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where runs are written (default: %(default)s)")
    p.add_argument("--run-id", help="name of the run directory (default: TARGET-UTCSTAMP-RANDOM)")
    p.add_argument("--box", default="local", help="the machine to measure (default: local)")
    p.add_argument("--box-python", help="Python interpreter on the box (default: this one)")
    p.add_argument("--engine", choices=["reference", "sglang"], help="engine (default: the target's)")
    p.add_argument("--budget", choices=["quick", "normal"], default=None,
                   help="quick halves the lever sweep's rounds (wider intervals) for a shorter run; recorded in the "
                        "run's target (default: the target's, normally 'normal')")
    p.set_defaults(func=cmd_investigate)

    p = sub.add_parser("replay", help="re-run a finished run with every tool result served from its log")
    p.add_argument("run")
    p.add_argument("--out", help="directory for the replay (default: RUN-replay-N beside it)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("report", help="render a run's PROFILE_FINDINGS.md from its findings")
    p.add_argument("run")
    p.add_argument("--out", help="write here instead of stdout")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("runs", help="list runs with their status")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("validate", help="check a target without running it")
    p.add_argument("target")
    p.set_defaults(func=cmd_validate)

    for name, (_, help_text) in TOOL_COMMANDS.items():
        # Listed here for --help; main() hands these to the tool's own parser before argparse sees them.
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOL_COMMANDS:
        return _run_tool_command(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)
