"""Command line: parse, hand to the runner or a tool's CLI, print the outcome.

Every subcommand exits with the codes of tools/exitcodes.py (0 done, 1 failed, 2 bad input, 3
awaiting a decision, 130 interrupted) and prints every error as one ``error: ...`` line on stderr.
With ``--json`` it prints one JSON object on stdout (``json_result``'s keys) instead of the text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from tools import exitcodes

DEFAULT_RUNS = Path(os.environ.get("PERF_INVESTIGATOR_RUNS", "runs"))


def _box(args):
    from agent.box.choice import BoxChoiceError, box_from_args

    try:
        return box_from_args(args)
    except BoxChoiceError as exc:
        raise SystemExit(_fail(str(exc), exitcodes.BAD_INPUT, args)) from None


def error_line(message: str) -> None:
    """The one form every error takes: one line on stderr, prefixed ``error: ``."""
    text = " ".join(str(message).split()) or "failed"
    print(f"error: {text}", file=sys.stderr)


# Each command's own --json keys, always present (null where they do not apply): README, "Machine-readable output".
JSON_KEYS = {
    "investigate": ("run", "report", "findings", "headline", "commits", "result"),
    "replay": ("run", "report", "findings", "headline", "commits"),
    "report": ("run", "out", "html", "markdown"),
    "validate": ("path", "target", "summary"),
    "runs": ("removed",),  # runs rm, runs --prune-interrupted (a plain `runs --json` prints the list of runs)
    "diff": ("a", "b", "numbers", "counts", "steps_a_only", "steps_b_only"),
    "recommend": ("run", "target", "setting", "splitk", "run_this", "why", "notes"),  # agent/recommend.py
}


def json_result(command: str, status: str, message: str, **fields: Any) -> dict[str, Any]:
    """The ``--json`` object: ``command``, ``status`` (done | failed | diverged | bad-input |
    awaiting-decision | interrupted), ``exit_code`` and ``message``, then the command's JSON_KEYS."""
    unknown = set(fields) - set(JSON_KEYS.get(command, ()))
    if unknown:  # a key the README does not document is a bug, not a feature
        raise ValueError(f"undocumented --json keys for {command}: {sorted(unknown)}")
    return {"command": command, "status": status, "exit_code": exitcodes.for_status(status), "message": message,
            **{key: None for key in JSON_KEYS.get(command, ())}, **fields}


def _print_json(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False))


def _fail(message: str, code: int, args=None, **fields: Any) -> int:
    """An error before any outcome exists: the error line, and with --json the object too."""
    error_line(message)
    if args is not None and getattr(args, "json", False):
        status = {exitcodes.BAD_INPUT: "bad-input", exitcodes.INTERRUPTED: "interrupted"}.get(code, "failed")
        _print_json(json_result(args.command, status, message, **fields))
    return code


CHOICE_MEANING = {
    "auto": "take the option the evidence favours",
    "splitk": "build the split-K rewrite on this box and measure it",
    "stop": "accept the ceiling and write the report",
}


def valid_choices(question: dict) -> dict[str, str]:
    """The answers the options step would take, each with what it does (the others are refused)."""
    from agent.steps.options import resolve_choice

    valid = {}
    for choice in question["choices"]:
        taken, _ = resolve_choice(choice, question["options"], question["auto"])
        if taken is not None:
            meaning = CHOICE_MEANING.get(choice, choice)
            valid[choice] = f"{meaning} (chooses {taken})" if choice == "auto" else meaning
    return valid


def decision_prompt(question: dict) -> str:
    """The text shown before asking: every option, then the answers that are valid here."""
    lines = ["", "Options:"]
    for option in question["options"]:
        offered = "offered" if option["offered"] else "not offered"
        lines.append(f"  {option['name']:<16} {offered:<12} bound {option['upper_x']:.3g}x  try here: "
                     f"{'yes' if option['can_try_here'] else 'no'}  ({option['why']})")
    lines.append("Answer one of:")
    lines += [f"  {choice:<7} {meaning}" for choice, meaning in valid_choices(question).items()]
    return "\n".join(lines)


def make_ask(progress, read=input, stream=None):
    """A prompt for the options step's decision that pauses the live progress line while it asks
    (the line redraws four times a second and would erase what is typed); None at end of input."""
    def ask(question: dict) -> str | None:
        out = stream or sys.stderr
        valid = valid_choices(question)
        pause = getattr(progress, "paused", None)
        with pause() if pause else nullcontext():
            print(decision_prompt(question), file=out, flush=True)
            while True:
                try:
                    answer = read(f"decide [{'/'.join(valid)}]: ").strip()
                except EOFError:
                    return None
                if answer in valid:
                    return answer
                print(f"  {answer!r} is not one of: {', '.join(valid)}", file=out, flush=True)
    return ask


# What a resume takes from the command lines that started and resumed the run unless it gives them again:
# who answers the decision, and the box measured on. (--budget, --stand-in and --engine are in the run's
# recorded target: fixed for the run, runner.resume refuses others.)
RESUMED = ("decide", "box", "box_python", "box_known_hosts", "box_insecure_accept_new", "box_fingerprint",
           "box_identity")


def _with_run_options(args) -> None:
    """Fill the RESUMED options the resume does not give from the run's journaled command lines, the
    latest that gives each; a line this version cannot read contributes nothing (nothing is guessed)."""
    from agent import runner

    given = {name: getattr(args, name) for name in RESUMED if getattr(args, name, None)}
    for argv in runner.command_lines(args.resume, Path(args.runs_dir)):
        try:
            recorded = build_parser(_RecordedLine).parse_args(argv)
        except (ValueError, SystemExit):
            continue
        for name in RESUMED:
            if getattr(recorded, name, None) and name not in given:
                setattr(args, name, getattr(recorded, name))


def cmd_investigate(args) -> int:
    from agent import runner

    if not args.resume and not args.target:
        return _fail("investigate needs a TARGET (or --resume RUN)", exitcodes.BAD_INPUT, args)
    if args.resume:
        _with_run_options(args)
    box = _box(args)
    progress = _progress(args)
    ask = make_ask(progress) if sys.stdin.isatty() and not args.decide else None
    ended = None
    argv = getattr(args, "command_line", None)
    try:
        if args.resume:
            # RUN is a run's directory or its id under --runs-dir; a TARGET given too must be the run's own
            outcome = runner.resume(args.resume, box, args.decide, ask, progress, runs_dir=Path(args.runs_dir),
                                    target_ref=args.target, argv=argv, budget=args.budget, stand_in=args.stand_in,
                                    engine=args.engine)
        else:
            outcome = runner.investigate(args.target, Path(args.runs_dir), box, args.decide, ask, progress,
                                         run_id=args.run_id, argv=argv, budget=args.budget, stand_in=args.stand_in,
                                         engine=args.engine)
        ended = "interrupted" if outcome.status == "interrupted" else None
    except KeyboardInterrupt:  # before the run could journal it (main says so)
        ended = "interrupted"
        raise
    finally:
        # before the outcome prints: the live line is erased, not left above it; a run cut short keeps
        # its step's line, so the user sees where it stopped
        progress.close(ended)
        getattr(box, "close", lambda: None)()  # an SSH box: its directory on the host, its connection
    return _report(outcome, args)


def _report(outcome, args) -> int:
    """Print a run's outcome (text, or the --json object) and return its exit code. A finished run
    and one awaiting a decision print on stdout; every other outcome is an error line."""
    code = exitcodes.for_status(outcome.status)
    found = _result(outcome, args)
    if outcome.status in ("done", "awaiting-decision"):
        if not getattr(args, "json", False):
            if found is None:
                print(outcome.message)
                if outcome.details.get("headline"):
                    print(outcome.details["headline"])
            else:
                from agent import summary

                if outcome.message != found["report"]:  # a run finished before: said first
                    print(outcome.message)
                print(summary.block(found, outcome.run_dir.name))
    else:
        error_line(outcome.message)
    if getattr(args, "json", False):
        from agent.rundir import REPORT

        run_dir = outcome.run_dir
        report = run_dir / REPORT if run_dir is not None and outcome.status == "done" else None
        extra = {"result": {k: v for k, v in found.items() if k != "text"} if found else None} \
            if args.command == "investigate" else {}
        _print_json(json_result(
            args.command, outcome.status, outcome.message, run=str(run_dir) if run_dir else None,
            report=str(report) if report is not None and report.is_file() else None,
            findings=outcome.details.get("findings"), headline=outcome.details.get("headline"),
            commits=outcome.details.get("commits"), **extra))
    return code


def _result(outcome, args) -> dict[str, Any] | None:
    """What a finished investigation found (agent.summary), printed once at its end; None for every
    other outcome and command."""
    if args.command != "investigate" or outcome.status != "done" or outcome.run_dir is None:
        return None
    from agent import summary
    from agent.runlog import CorruptLog

    try:
        return summary.result(outcome.run_dir)
    except (OSError, CorruptLog, ValueError):  # the run is done; a journal unread since only costs the block
        return None


def cmd_replay(args) -> int:
    from agent import runner

    progress = _progress(args)
    try:
        outcome = runner.replay(Path(args.run), Path(args.out) if args.out else None, progress)
    finally:
        progress.close()
    return _report(outcome, args)


def cmd_report(args) -> int:
    from agent import runner
    from agent.rundir import RunDirError
    from agent.runlog import CorruptLog
    from reports.html import render_html
    from reports.links import relink

    targets = [(flag, Path(value)) for flag, value in (("--out", args.out), ("--html", args.html)) if value]
    fields = {"run": args.run, "out": args.out, "html": args.html, "markdown": None}
    for flag, path in targets:
        if not path.parent.is_dir():  # found before rendering, not as an OSError after it
            return _fail(f"{flag} {path}: directory {path.parent} does not exist", exitcodes.BAD_INPUT, args, **fields)
    try:
        text = runner.render(Path(args.run))
    except (RunDirError, CorruptLog) as exc:
        return _fail(str(exc), exitcodes.BAD_INPUT, args, **fields)
    for flag, path in targets:
        try:
            moved = relink(text, Path(args.run), path.parent)
            path.write_text(moved if flag == "--out" else render_html(moved, path.parent))
        except OSError as exc:
            return _fail(f"{flag} {path}: {exc.strerror or exc}", exitcodes.BAD_INPUT, args, **fields)
    written = [str(path) for _, path in targets]
    if args.json:
        _print_json(json_result("report", "done", ", ".join(written) or "rendered",
                                **{**fields, "markdown": None if written else text}))
    elif written:
        print("\n".join(written))
    else:
        sys.stdout.write(text)
    return exitcodes.DONE


def cmd_runs(args) -> int:
    from agent import runlist, runner

    runs_dir = Path(args.runs_dir)
    if args.action or args.prune_interrupted:
        return _remove_runs(args, runs_dir)
    if args.remove:
        return _fail(f"runs: unexpected {' '.join(args.remove)} (to remove runs: runs rm RUN...)", exitcodes.BAD_INPUT)
    rows = [runlist.describe(row) for row in runner.list_runs(runs_dir)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return exitcodes.DONE
    if not rows:
        print(f"no runs under {args.runs_dir}")
        return exitcodes.DONE
    import shutil

    print(runlist.table(rows, shutil.get_terminal_size((120, 24)).columns))
    return exitcodes.DONE


def _remove_runs(args, runs_dir: Path) -> int:
    """``runs rm RUN...`` and ``runs --prune-interrupted``: every run named is checked before any is
    removed, so that a typo removes nothing; what was removed is printed (nothing is asked)."""
    from agent import runlist, runner

    if args.action == "rm" and not args.remove:
        return _fail("runs rm needs the RUN to remove (its directory, or its id under --runs-dir)", exitcodes.BAD_INPUT, args)
    try:
        paths = [runlist.find_run(ref, runs_dir) for ref in args.remove]
        rows = [runlist.describe({**runner.run_status(path), "path": str(path)}) for path in paths]
        if args.prune_interrupted:
            named = {Path(r["path"]).resolve() for r in rows}
            rows += [runlist.describe(r) for r in runner.list_runs(runs_dir)
                     if r["status"] == "interrupted" and Path(r["path"]).resolve() not in named]
        for row in rows:
            if row["status"] == "running":
                raise runlist.RunsError(f"{row['path']}: running; nothing removed")
    except runlist.RunsError as exc:
        return _fail(str(exc), exitcodes.BAD_INPUT, args)
    for row in rows:
        runlist.remove(row)
    message = f"removed {len(rows)} run{'s' if len(rows) != 1 else ''}" if rows else \
        f"no interrupted runs under {args.runs_dir}"
    if args.json:
        _print_json(json_result("runs", "done", message, removed=rows))
    else:
        for row in rows:
            print(f"removed {row['path']} ({row['status']}, {row['findings']} findings, started {row['started']})")
        print(message)
    return exitcodes.DONE


def cmd_validate(args) -> int:
    from agent.config import TargetError, load_target

    try:
        target, path = load_target(args.target)
    except TargetError as exc:
        return _fail(str(exc), exitcodes.BAD_INPUT, args, path=None, target=None)
    d = target.deployment
    if args.json:
        from agent.redact import redact_target

        _print_json(json_result(
            "validate", "done", f"{path}: valid", path=str(path),
            target=redact_target(target).model_dump(mode="json"),
            summary={"step_budget_ms": target.goal.step_budget_ms, "heads_per_rank": d.heads_per_rank(target.model.heads),
                     "kernel_heads": d.kernel_heads(target.model.heads), "levers": len(target.levers)}))
        return exitcodes.DONE
    print(f"{path}: valid. goal {target.goal.output_tok_s:g} tok/s at concurrency {target.goal.concurrency} "
          f"(step budget {target.goal.step_budget_ms:.3g} ms); {target.model.name}: {target.model.layers} layers, "
          f"{target.model.heads} heads ({d.heads_per_rank(target.model.heads)} per rank at TP{d.tp}, kernel launched with "
          f"{d.kernel_heads(target.model.heads)}); {d.gpus}x {d.gpu} sm_{d.sm}, {d.sm_count} SMs; {len(target.levers)} levers")
    return exitcodes.DONE


TOOL_COMMANDS = {
    "trace": ("tools.trace.cli", "kernel table of PyTorch-profiler traces (--by-op, --sequences, --overlap)"),
    "grid": ("tools.kernel_source.cli", "a kernel's launch grid, loops and resources from its source"),
    "gates": ("tools.gates.cli", "capability gates of an engine source tree for an SM version"),
}


def _prog() -> str:
    """How the user called us, for usage and hints: the console command, or the module."""
    return "perf-investigator" if Path(sys.argv[0]).name == "perf-investigator" else "python -m agent"


# One or two commands a subcommand's --help ends with: what a newcomer types first.
EXAMPLES = {
    "investigate": ["investigate dsv4-flash --decide auto            # the worked case, no prompt",
                    "investigate my-target.yaml --budget quick --runs-dir /tmp/runs",
                    "investigate --resume runs/RUN --decide stop     # continue a run that stopped"],
    "replay": ["replay runs/RUN                                  # every tool result served from its journal",
               "replay runs/RUN --out /tmp/again --json"],
    "report": ["report runs/RUN > findings.md",
               "report runs/RUN --out docs/findings.md           # links rewritten to open from docs/",
               "report runs/RUN --html docs/findings.html        # one page, plots inside, links as --out's"],
    "runs": ["runs                                             # one line a run",
             "runs rm runs/RUN                                 # remove one",
             "runs --prune-interrupted --json                  # remove every interrupted run"],
    "validate": ["validate dsv4-flash", "validate my-target.yaml --json"],
    "recommend": ["recommend runs/examples/dsv4-flash-h200-20261202b   # the SGLang command to run", "recommend RUN --json"],
    "diff": ["diff tests/data/examples-20261201/h200 runs/examples/dsv4-flash-h200-20261202b", "diff RUN_A RUN_B --json"],
    "trace": ["trace rank0.json.gz rank1.json.gz --by-rank --top 10", "trace trace.json --by-op   # time by launching frame",
              "trace eager.json.gz graph.json.gz --sequences    # fusion candidates; --overlap: comm vs compute"],
    "grid": ["grid --source flash_mla_sm120_triton.py --kernel _tiled_sparse_decode_kernel \\\n"
             "       --shape B=1 --shape H=64 --shape topk=512 --shape has_topk_len=false --sms 188 --arch sm_120",
             "grid --source kernels/ --kernel my_kernel --shape N=4096 --sms 132 --no-compile"],
    "gates": ["gates --source .venv/lib/python3.11/site-packages/sglang --sm 120",
              "gates --source ENGINE_DIR --sm 90 --kind env --json"],
}


def _epilog(command: str) -> str:
    return "Examples:\n" + "\n".join(f"  {_prog()} {line}" for line in EXAMPLES[command])


def _run_tool_command(name: str, argv: list[str]) -> int:
    """A tool's own CLI, imported only when asked for."""
    import importlib

    module_name, help_text = TOOL_COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = Parser(prog=f"{_prog()} {name}", description=help_text, epilog=_epilog(name),
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the one-line ``error: ...`` every error is, with the bad-input code,
    and a flag is taken only as spelled out: an abbreviation that works today would silently mean
    another flag, or stop working, once a flag sharing its prefix is added (issue 31)."""

    abbreviations = False

    def __init__(self, *args, **kwargs):
        # subparsers are made by this class too (argparse's parser_class is the parent's type)
        super().__init__(*args, **{"allow_abbrev": self.abbreviations, **kwargs})

    def error(self, message: str):
        error_line(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(exitcodes.BAD_INPUT)

    def parse_args(self, args=None, namespace=None):
        """An unknown flag is the subcommand's error, with its --help and the flag meant if one is
        close: argparse would blame the top-level parser, whose help does not list it."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = self._subcommand(parsed)
            (sub or self).error(f"unrecognized arguments: {' '.join(extras)}" + _did_you_mean(extras, sub or self))
        return parsed

    def _subcommand(self, parsed) -> argparse.ArgumentParser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None))
        return None


def _did_you_mean(extras: list[str], parser: argparse.ArgumentParser) -> str:
    import difflib

    flags = [flag for action in parser._actions for flag in action.option_strings]
    # an abbreviation (refused, see Parser) means the one flag it starts, however far difflib puts them
    started = {e: [f for f in flags if f.startswith(e.split("=")[0])] for e in extras if e.startswith("--")}
    close = [m for extra, flagged in started.items()
             for m in (flagged if len(flagged) == 1 else difflib.get_close_matches(extra.split("=")[0], flags, n=1))]
    return f"; did you mean {' '.join(close)}?" if close else ""


def _json_flag(p: argparse.ArgumentParser, gives: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON object on stdout instead of the text, also "
                   f"on failure: command, status, exit_code, message, {gives}")


def _verbosity_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr: errors and the outcome only")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="every step and tool call as a line of its own on stderr (a terminal otherwise gets one "
                            "live line)")


def _progress(args):
    from agent.progress import PlainProgress, SilentProgress, make_progress

    if getattr(args, "quiet", False):
        class Quiet(SilentProgress):
            paused = PlainProgress.paused

            def close(self, ended=None):
                pass
        return Quiet()
    return PlainProgress() if getattr(args, "verbose", False) else make_progress()


class _RecordedLine(Parser):
    """A journaled command line read back: one this version cannot parse raises, and prints nothing."""

    abbreviations = True  # a run started before flags had to be spelled out keeps the options it was given

    def error(self, message: str):
        raise ValueError(message)


def build_parser(parser_class: type[Parser] = Parser) -> argparse.ArgumentParser:
    from agent import diff, recommend
    from agent.box.choice import add_box_arguments

    parser = parser_class(prog=_prog(), description="Investigate why an LLM deployment is far from its throughput goal.",
                    epilog="Examples:\n" + "\n".join(f"  {_prog()} {EXAMPLES[c][0]}" for c in ("investigate", "runs", "report"))
                    + f"\n\n{_prog()} COMMAND --help: a command's arguments and examples.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, epilog=_epilog(name), formatter_class=argparse.RawDescriptionHelpFormatter,
                              **kwargs)

    p = add("investigate", help="run an investigation (or resume one)")
    p.add_argument("target", nargs="?", help="target name (agent/targets/NAME.yaml) or path to a target YAML")
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run from its checkpoint: its directory, "
                   "or its id under --runs-dir (a TARGET given too must be the run's)")
    p.add_argument("--decide", choices=["auto", "splitk", "stop"], help="answer the options step without a prompt "
                   "(a resume keeps the run's unless given again, as it keeps its --box options)")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where runs are written (default: %(default)s)")
    p.add_argument("--run-id", help="name of the run directory (default: TARGET-UTCSTAMP-RANDOM)")
    add_box_arguments(p)
    p.add_argument("--engine", choices=["reference", "sglang"], help="the engine the target must name (default: the "
                   "target's engine.kind; a target of another kind is refused)")
    p.add_argument("--stand-in", action="store_true", help="SGLang targets: launch the stand-in server "
                   "(tools/engines/sglang_standin: the reference engine behind SGLang's routes, for machines without "
                   "SGLang's GPU stack) instead of sglang.launch_server; recorded in the run's target and its report")
    p.add_argument("--budget", choices=["quick", "normal"], default=None,
                   help="quick halves the lever sweep's rounds (wider intervals) for a shorter run; recorded in the "
                        "run's target (default: the target's, normally 'normal')")
    _verbosity_flags(p)
    _json_flag(p, "run, report, findings, headline, commits")
    p.set_defaults(func=cmd_investigate)

    p = add("replay", help="re-run a finished run with every tool result served from its log")
    p.add_argument("run", metavar="RUN", help="the run to replay: its directory (runs/RUN)")
    p.add_argument("--out", help="directory for the replay (default: RUN-replay-N beside it)")
    _verbosity_flags(p)
    _json_flag(p, "run, report, findings, headline, commits")
    p.set_defaults(func=cmd_replay)

    p = add("report", help="render a run's PROFILE_FINDINGS.md from its findings")
    p.add_argument("run", metavar="RUN", help="a finished run: its directory (runs/RUN)")
    p.add_argument("--out", help="write here instead of stdout (its links to plots and findings are made to open "
                   "from there)")
    p.add_argument("--html", metavar="OUT", help="write it as one HTML page here, plots inside, links as --out's")
    _json_flag(p, "run, out, html, markdown (the report when written to neither --out nor --html)")
    p.set_defaults(func=cmd_report)

    p = add("runs", help="list runs with their status (runs rm RUN, --prune-interrupted: remove runs)")
    p.add_argument("action", nargs="?", choices=["rm"], help="rm: remove the RUNs named after it")
    p.add_argument("remove", nargs="*", metavar="RUN", help="a run's directory, or its id under --runs-dir")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where the runs are (default: %(default)s)")
    p.add_argument("--prune-interrupted", action="store_true",
                   help="remove every interrupted run under --runs-dir (not running, finished or awaiting a "
                        "decision); asks nothing, prints what it removed")
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list, one object a run (with rm or "
                   "--prune-interrupted: one object whose 'removed' lists the runs removed)")
    p.set_defaults(func=cmd_runs)

    diff.add_arguments(add("diff", help="two runs' numbers side by side: the change and whether it is beyond their intervals"))
    recommend.add_arguments(add("recommend", help="the SGLang launch command for a run's best measured setting (and split-K's)"))

    p = add("validate", help="check a target without running it")
    p.add_argument("target", metavar="TARGET", help="a target name (agent/targets/NAME.yaml) or a path to a target YAML file")
    _json_flag(p, "path, target (as validated, secrets redacted), summary")
    p.set_defaults(func=cmd_validate)

    for name, (_, help_text) in TOOL_COMMANDS.items():
        # Listed here for --help; main() hands these to the tool's own parser before argparse sees them.
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


STDOUT_CLOSED = 128 + 13  # SIGPIPE's, as shells report a cat whose reader left (130 is SIGINT's the same way)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe nobody reads any more (a BrokenPipeError from elsewhere, the box's
    pipes, is an error like any other)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(mask & select.POLLERR for _, mask in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is no file
        return False


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; its exit code (tools/exitcodes.py). Ctrl-C anywhere is INTERRUPTED; an
    unexpected exception is one error line and FAILED (the traceback with PERF_INVESTIGATOR_DEBUG=1)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] in TOOL_COMMANDS:
            code = _run_tool_command(argv[0], argv[1:])
        else:
            args = build_parser().parse_args(argv)
            args.command_line = list(argv)  # journaled: a resume reuses its options
            code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so that a reader gone away is caught below
        return code
    except KeyboardInterrupt:
        error_line("interrupted")
        return exitcodes.INTERRUPTED
    except Exception as exc:  # a bug: say so in the one error form; the traceback is for whoever debugs it
        if isinstance(exc, BrokenPipeError) and _stdout_gone():
            # `... | head`: the reader has what it wanted. Say nothing, as cat and grep do, and keep the
            # interpreter's own flush at exit from writing to the closed pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return STDOUT_CLOSED
        if os.environ.get("PERF_INVESTIGATOR_DEBUG"):
            import traceback

            traceback.print_exc()
        error_line(f"{type(exc).__name__}: {exc}")
        return exitcodes.FAILED
