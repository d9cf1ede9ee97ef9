"""``agent recommend RUN``: the SGLang launch command for the best measured setting a run found, and after a
split-K build, the command that puts the rewrite in place.

What "best" means is the run's own: the levers step's choice (``LeversData.best``: the fastest lever that
moved up beyond noise with outputs matching the baseline's and timings comparable with it, never a backend
the declared hardware is gated out of), read from the journal; nothing is measured or re-chosen here. A
run whose sweep found no such lever recommends the baseline and says why each lever that moved up was not
taken. The split-K rewrite, when the run built and measured it, is put in place by SGLang's own plugin
framework (tools/engines/sglang/splitk_plugin.py); its command is the one to run when its measured gain
exceeds the levers' winner beyond both intervals, measured on a GPU (an interpreted CPU timing is shown,
never chosen). A reference-engine run's options become SGLang's flags where SGLang has one; a setting with
an option SGLang lacks gets no command of its own (the baseline's is given, and why).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.config import Target, TargetError, parse_target
from agent.evidence import LeverResult, LeversData, SplitkData, typed
from agent.rundir import RunDirError, resolve_run
from agent.runlog import LOG_NAME, CorruptLog, read_events, target_of
from schema.finding import Finding
from tools.engines.sglang import splitk_plugin

LAUNCHER = ["python", "-m", "sglang.launch_server"]
# A reference-engine target names no checkpoint: this stands where the user's goes (SGLang's parser takes any path).
MODEL_PLACEHOLDER = "/path/to/{model}"
# The reference engine's options as SGLang 0.5.23's server flags: value -> flags ([] where it is SGLang's
# default); an option or value missing here has no SGLang equivalent (the reference engine's own).
OPTION_FLAGS: dict[str, dict[Any, list[str]]] = {
    # 0.5.23 replaced --disable-cuda-graph by the decode graph backend (its Deprecated action names it)
    "cuda_graph": {True: [], False: ["--cuda-graph-backend-decode", "disabled"]},
    "compile": {False: [], True: ["--enable-torch-compile"]},
    "moe": {"grouped": []},  # the per-expert loop is the reference engine's, not a SGLang MoE runner
    "steps_per_graph": {1: []},
    "delay_frac": {0: [], 0.0: []},  # a planted calibration delay: never a deployment's
}


class RecommendError(Exception):
    """The run named cannot give a recommendation (bad input: not a run, or not measured that far)."""


@dataclass
class Launch:
    """One process of the deployment: its environment and argv (``python -m sglang.launch_server ...``); its role
    is ``server``, or for a disaggregated deployment ``prefill``, ``decode`` or ``router``."""

    env: dict[str, str]
    argv: list[str]
    role: str = "server"

    def command(self) -> str:
        """The shell line: the environment, then the launch. ``$PYTHONPATH`` is left for the shell to expand."""
        def value(v: str) -> str:
            return '"' + v + '"' if "$" in v else shlex.quote(v)
        return " ".join([*(f"{k}={value(v)}" for k, v in sorted(self.env.items())), shlex.join(self.argv)])

    def as_json(self) -> dict[str, Any]:
        return {"role": self.role, "env": dict(self.env), "argv": list(self.argv), "command": self.command()}


def launches_json(launches: list[Launch]) -> dict[str, Any]:
    """``launches`` (one object a process) and ``command``: their shell lines, one a line, the servers
    started in the background before the router (a disaggregated deployment) or the one server alone."""
    lines = [launch.command() + (" &" if len(launches) > 1 and launch.role != "router" else "") for launch in launches]
    return {"launches": [launch.as_json() for launch in launches], "command": "\n".join(lines)}


@dataclass
class Recommendation:
    """``setting``: the levers' winner (or the baseline) and its launch; ``splitk``: the rewrite put in place,
    or None with ``splitk_absent`` saying why; ``run_this``: "setting" or "splitk"; ``why``: the reasons."""

    run: str
    target: str
    setting: dict[str, Any]
    splitk: dict[str, Any] | None
    run_this: str
    why: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


# -- reading the run ----------------------------------------------------------------------------------------


def _read(ref: str, runs_dir: Path | None) -> tuple[Path, Target, dict[str, Finding]]:
    """The run's directory, its recorded target and each step's latest finding; RecommendError if unusable."""
    try:
        root = resolve_run(ref, runs_dir)
        events = read_events(root / LOG_NAME)
    except RunDirError as exc:
        raise RecommendError(str(exc)) from None
    except (OSError, CorruptLog) as exc:
        raise RecommendError(f"{ref}: not a run whose journal can be read ({exc})") from None
    start = next((e for e in events if e.get("kind") == "run_start"), None)
    if start is None:
        raise RecommendError(f"{ref}: its journal has no run_start event")
    try:
        target = parse_target(target_of(start, events), f"{root / LOG_NAME} (run_start)")
    except TargetError as exc:
        raise RecommendError(str(exc)) from None
    by_index: dict[int, Finding] = {}
    for event in events:
        if event.get("kind") == "finding":
            by_index[event["index"]] = Finding.model_validate(event["finding"])
    return root, target, {f.step: f for _, f in sorted(by_index.items())}


# -- SGLang's arguments for a setting ---------------------------------------------------------------------------


def option_flags(options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """SGLang flags for reference-engine options, and the options SGLang has no flag for (``name=value``)."""
    flags, missing = [], []
    for name, value in sorted(options.items()):
        mapped = OPTION_FLAGS.get(name, {}).get(value)
        if mapped is None:
            missing.append(f"{name}={value}")
        else:
            flags += mapped
    return flags, missing


def base_launch(target: Target) -> Launch:
    """The deployment's own server launch: an SGLang target's server arguments and environment, or for a
    reference target the declared TP degree and its engine environment over a placeholder model path."""
    if target.engine.kind == "sglang":
        from agent.engine_sglang import server_args

        return Launch(dict(target.engine.env), [*LAUNCHER, *server_args(target)])
    model = MODEL_PLACEHOLDER.format(model=target.model.name)
    return Launch(dict(target.engine.env), [*LAUNCHER, "--model-path", model, "--tp-size", str(target.deployment.tp)])


# A disaggregated deployment's ports, as the argument check places them (tools/engines/sglang/check.py).
PD_PORTS = {"prefill": 30001, "decode": 30002}
PD_BOOTSTRAP = 8998


def _disaggregated(target: Target, base: Launch, env: dict[str, str], args: list[str]) -> list[Launch]:
    """A prefill server, a decode server and the router, as tools/engines/sglang/disagg.py launches them: the
    setting's env and args on the side(s) the target's ``levers_on`` names."""
    dis = target.engine.disaggregation
    out = []
    for side, part in (("prefill", dis.prefill), ("decode", dis.decode)):
        on = dis.levers_on in (side, "both")
        out.append(Launch({**base.env, **part.env, **(env if on else {})},
                          [*base.argv, *part.args, *(args if on else []), "--disaggregation-mode", side,
                           "--disaggregation-transfer-backend", dis.transfer_backend, "--disaggregation-bootstrap-port",
                           str(PD_BOOTSTRAP), "--port", str(PD_PORTS[side])], side))
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation", "--prefill",
              f"http://127.0.0.1:{PD_PORTS['prefill']}", str(PD_BOOTSTRAP), "--decode",
              f"http://127.0.0.1:{PD_PORTS['decode']}", *dis.router.args]
    return out + [Launch({}, router, "router")]


def setting_launch(target: Target, env: dict[str, str], options: dict[str, Any],
                   args: list[str]) -> tuple[list[Launch], list[str]]:
    """The deployment's launches with a setting's environment, options (as flags) and arguments over it, and
    the options SGLang lacks. The target's baseline options are the setting's unless it sets them."""
    base = base_launch(target)
    merged = {**(target.engine.options if target.engine.kind == "reference" else {}), **options}
    flags, missing = option_flags(merged)
    if target.engine.disaggregation is not None:
        return _disaggregated(target, base, env, [*flags, *args]), missing
    return [Launch({**base.env, **env}, [*base.argv, *flags, *args])], missing


def lever_launch(target: Target, names: list[str], env: dict[str, str] | None = None) -> tuple[list[Launch], list[str]]:
    """The deployment with the levers ``names`` applied (their env, options and args), ``env`` over theirs."""
    levers = [lever for lever in target.levers if lever.name in names]
    lever_env = {k: v for lever in levers for k, v in lever.env.items()}
    options = {k: v for lever in levers for k, v in lever.options.items()}
    args = [a for lever in levers for a in [*lever.flags, *lever.args]]
    return setting_launch(target, {**lever_env, **(env or {})}, options, args)


# -- the levers' winner -------------------------------------------------------------------------------------------


def _interval_text(ratio: float | None, interval: list[float] | None) -> str:
    if ratio is None:
        return "not measured"
    inside = f" [{interval[0]:.4g}, {interval[1]:.4g}]" if interval else ""
    return f"{ratio:.4g}x{inside}"


def passed_over(levers: LeversData, chosen: LeverResult | None) -> list[str]:
    """Why each lever that moved up is not the recommendation (the levers step's own criteria, as recorded)."""
    out = []
    for r in levers.levers:
        if r.status != "moves up" or (chosen is not None and r.name == chosen.name):
            continue
        text = _interval_text(r.ratio, r.interval)
        if not r.comparable:
            why = "its timing is not comparable with the baseline's (e.g. interpreted against native kernels)"
        elif r.output is None or r.output.ok is None:
            why = "its output was not checked against the baseline's (an SGLang server's runs give none)"
        elif not r.output.ok:
            why = f"its output differs from the baseline's ({r.output.note})"
        elif chosen is not None and (r.ratio or 0) <= (chosen.ratio or 0):
            close = chosen.interval and r.interval and r.interval[1] >= chosen.interval[0]
            why = f"{chosen.name} measured faster" + (" (within noise of it: their intervals overlap)" if close else "")
        else:
            why = "a backend the declared hardware is gated out of (a what-if)"
        out.append(f"{r.name} moved up {text} but is not taken: {why}")
    return out


def winner(target: Target, levers: LeversData) -> tuple[dict[str, Any], list[Launch], list[str]]:
    """The levers step's best setting (its record) with its launch, and the reasons; the baseline when it
    chose none, or when its lever has an option SGLang has no flag for."""
    best = levers.best
    if best is None:
        raise RecommendError("the run's levers finding records no best setting (a journal older than that "
                             "choice): replay or regenerate it with this version")
    by_name = {r.name: r for r in levers.levers}
    chosen = by_name.get(best.levers[0]) if best.levers else None
    why = passed_over(levers, chosen)
    launch, missing = lever_launch(target, best.levers)
    if chosen is not None and missing:
        why.append(f"{chosen.name} was measured in the reference engine with {', '.join(missing)}, which SGLang has "
                   f"no flag for: the command is the baseline's")
        chosen, (launch, _) = None, lever_launch(target, [])
    if chosen is None:
        base_tok_s = best.tok_s if not best.levers else None
        why.insert(0, "no lever measured a gain the declared hardware allows (beyond noise, outputs matching, "
                      "timings comparable): the baseline is recommended")
        setting = {"name": "baseline", "levers": [], "tok_s": base_tok_s, "ratio": 1.0, "interval": None}
    else:
        why.insert(0, f"{chosen.name}: the levers sweep's measured winner, {_interval_text(chosen.ratio, chosen.interval)} "
                      f"of the baseline ({chosen.tok_s:.4g} tok/s)")
        setting = {"name": chosen.name, "levers": [chosen.name], "tok_s": chosen.tok_s, "ratio": chosen.ratio,
                   "interval": chosen.interval}
    return setting, launch, why


# -- the split-K rewrite put in place ---------------------------------------------------------------------------

PUT_IN_PLACE = (
    "SGLang has no flag for the rewrite: {plugin} registers a REPLACE hook on {function} through SGLang's own "
    "plugin framework (entry point {name} of group {group}, declared by the dist-info in {plugin_dir}, which "
    "PYTHONPATH puts on the path; nothing is pip-installed), and {backend_env}={backend} routes the sm_120 "
    "decode to that function. Each server process that serves a call logs '{announce} ...' once. On the GPU "
    "box, use this repository's path there in both PYTHONPATH entries; if SGLANG_PLUGINS is set, add {name} to it.")


def _splitk_launch(target: Target, data: SplitkData) -> tuple[list[Launch], list[str]]:
    """The deployment with the levers of the setting the rewrite was measured in, and SGLang's Triton backend
    with the plugin in place of the reference engine's ``splitk`` backend. The measured setting's own env and
    options are the box's (a CPU box runs without CUDA graphs, a stand-in box plans for the declared GPU
    through variables): on the declared GPU the deployment's are the ones, and the rewrite plans for it."""
    return lever_launch(target, list(data.setting.levers) if data.setting else [], splitk_plugin.launch_env())


def splitk_part(target: Target, finding: Finding | None) -> tuple[dict[str, Any] | None, str]:
    """The rewrite's launch and its measurement, or None and why there is none."""
    if finding is None:
        return None, "the run built no split-K rewrite (its decision was not splitk, or it stopped before)"
    data = typed(finding)
    if data.measured_x is None or not data.measured_interval:
        return None, "the split-K build was not measured in the engine: nothing to recommend it by"
    if data.output is not None and data.output.ok is False:
        return None, f"the engine's output with split-K differs from the baseline's ({data.output.note})"
    launch, missing = _splitk_launch(target, data)
    if missing:
        return None, (f"split-K was measured in a setting with {', '.join(missing)}, which SGLang has no flag for")
    profiled = data.setting.label if data.setting else "the profiled setting"
    interpreted = "cpu-interpreter" in finding.labels
    plan = data.plan.short if data.plan and not data.plan.declared else ""
    basis = "; ".join(filter(None, [
        f"measured {_interval_text(data.measured_x, data.measured_interval)} of the {profiled.replace(' + split-K', '')} "
        "(engine tok/s with split-K over without, paired rounds)",
        "under the Triton CPU interpreter: interpreted kernels' times, not a GPU's" if interpreted else "",
        plan and f"built with {plan}", "stand-in measurements" if "stand-in" in finding.labels else ""]))
    return {"measured_x": data.measured_x, "interval": data.measured_interval, "over": [] if not data.setting else
            list(data.setting.levers), "interpreted": interpreted, "what_if": bool(plan), "basis": basis,
            "plugin": splitk_plugin.__name__, "function": splitk_plugin.TARGET,
            "put_in_place": PUT_IN_PLACE.format(
                plugin=f"{splitk_plugin.__name__}.register", function=splitk_plugin.TARGET, name=splitk_plugin.NAME,
                group=splitk_plugin.GROUP, plugin_dir=splitk_plugin.PLUGIN_DIR.relative_to(splitk_plugin.REPO_ROOT),
                backend_env=splitk_plugin.BACKEND_ENV, backend=splitk_plugin.BACKEND, announce=splitk_plugin.ANNOUNCE),
            **launches_json(launch)}, ""


def _choose(setting: dict[str, Any], splitk: dict[str, Any] | None) -> tuple[str, str]:
    """Which command to run: split-K where, measured on a GPU, its interval clears the levers' winner's."""
    if splitk is None:
        return "setting", ""
    if splitk["interpreted"]:
        return "setting", "split-K's gain was timed under the CPU interpreter: measure it on a GPU before running it"
    if splitk["what_if"]:  # the kernels the deployment would run were not the ones timed
        return "setting", ("split-K's gain was measured with the box's own tile plan, a what-if for the declared GPU: "
                           "measure the declared GPU's plan (rewrite.plan: declared) before running it")
    low = splitk["interval"][0]
    if splitk["over"] == setting["levers"]:  # measured against the winner itself
        beats, versus = low > 1.0, "1 (no change)"
    else:  # both against the baseline, in their own rounds
        high = setting["interval"][1] if setting["interval"] else setting["ratio"]
        beats, versus = low > high, f"{setting['name']}'s {high:.4g}x"
    if beats:
        return "splitk", f"split-K: its interval's low end {low:.4g}x clears {versus}"
    return "setting", f"split-K does not clear {versus} beyond noise (its low end {low:.4g}x)"


def _notes(target: Target, levers: Finding) -> list[str]:
    notes = []
    if target.engine.kind == "reference":
        notes += [f"measured on the reference engine (the model's decode layers in PyTorch), not an SGLang server: "
                  f"its options are given as SGLang's flags ({', '.join(sorted(OPTION_FLAGS))} where SGLang has one); "
                  f"its torch attention backend is its own, written after SGLang's fallback (its Triton one is SGLang's)",
                  f"{MODEL_PLACEHOLDER.format(model=target.model.name)} stands for the checkpoint (the target names none)"]
    elif target.engine.server is not None and target.engine.server.stand_in:
        notes.append("measured on the stand-in server (tools/engines/sglang_standin), not SGLang's")
    if "stand-in" in levers.labels:
        d = target.deployment
        notes.append(f"the box stood in for the declared {d.gpus}x {d.gpu} (sm_{d.sm}): its numbers are the box's, "
                     f"the choice is restricted to what sm_{d.sm} allows")
    return notes


def recommend(ref: str, runs_dir: Path | None = None) -> Recommendation:
    """The recommendation for run ``ref`` (a directory, or an id under ``runs_dir``); RecommendError when the
    run is not one or did not measure its levers."""
    root, target, steps = _read(ref, runs_dir)
    if "levers" not in steps:
        raise RecommendError(f"{ref}: the run has no levers finding (it stopped before measuring any setting)")
    setting, launch, why = winner(target, typed(steps["levers"]))
    setting.update(launches_json(launch))
    splitk, absent = splitk_part(target, steps.get("splitk"))
    run_this, reason = _choose(setting, splitk)
    why += [absent or reason] if (absent or reason) else []
    return Recommendation(str(root), target.name, setting, splitk, run_this, why, _notes(target, steps["levers"]))


def text(rec: Recommendation) -> str:
    """What ``agent recommend`` prints: the command to run first, then the other, the reasons and the notes."""
    s, k = rec.setting, rec.splitk
    measured = "the baseline" if not s["levers"] else f"{s['name']}, {_interval_text(s['ratio'], s['interval'])} of the baseline"
    lines = [f"{rec.target} ({rec.run}): run {'the split-K rewrite' if rec.run_this == 'splitk' else measured}", ""]
    blocks = [("Best measured setting (lever sweep): " + measured, s["command"], None)]
    if k is not None:
        blocks.append((f"After the split-K build: {k['basis']}", k["command"], k["put_in_place"]))
    if rec.run_this == "splitk":
        blocks.reverse()
    for title, command, how in blocks:
        lines += [title, *(f"  {line}" for line in command.splitlines())] + ([f"  ({how})"] if how else []) + [""]
    lines += ["Why:"] + [f"  - {w}" for w in rec.why]
    lines += (["Notes:"] + [f"  - {n}" for n in rec.notes]) if rec.notes else []
    return "\n".join(lines) + "\n"


# -- the command line ---------------------------------------------------------------------------------------------


def add_arguments(p) -> None:
    from agent.cli import DEFAULT_RUNS, _json_flag

    p.add_argument("run", metavar="RUN", help="a run: its directory, or its id under --runs-dir")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where run ids are looked up (default: %(default)s)")
    _json_flag(p, "run, target, setting (name, levers, tok_s, ratio, interval, launches: role, env, argv, command each; "
               "command), splitk (null, or measured_x, interval, basis, put_in_place, launches, command, ...), "
               "run_this (setting | splitk), why, notes")
    p.set_defaults(func=command)


def command(args) -> int:
    """``recommend RUN``: the text, or with --json the object; a RUN that cannot give one is bad input."""
    import sys

    from agent.cli import _fail, _print_json, json_result
    from tools import exitcodes

    try:
        rec = recommend(args.run, Path(args.runs_dir))
    except RecommendError as exc:
        return _fail(str(exc), exitcodes.BAD_INPUT, args)
    if args.json:
        chosen = rec.splitk if rec.run_this == "splitk" else rec.setting
        _print_json(json_result("recommend", "done", chosen["command"], **rec.as_json()))
    else:
        sys.stdout.write(text(rec))
    return exitcodes.DONE
