"""``surface``: what an SGLang release exposes to the project's levers, read from that release itself: its
server arguments (its own parser), its environment variables (``sglang.srt.environ.Envs``), the fields of the
``/start_profile`` request (io_struct.py ``ProfileReq``, by ``ast``) and the source lines that name its trace
files (the profiler's ``-TP-``/``-DECODE`` parts, by text) and the benchmark client's flags (by ``ast``). One JSON
object; scripts/real_sglang/diff.py sets
two releases' side by side (docs/sglang-0.5.17-vs-0.5.23.md).
"""

from __future__ import annotations

import ast

from . import check, installed

PROFILE_REQ = "srt/managers/io_struct.py"
HTTP_SERVER = "srt/entrypoints/http_server.py"
# The files that build a trace's name (traces.py says how 0.5.23 builds it) and the markers of those lines.
TRACE_FILES = ("srt/managers/scheduler_components/profiler_manager.py", "srt/utils/profile_utils.py")
TRACE_MARKERS = ("TP-", "DP-", "PP-", "EP-", ".trace.json.gz", "forward_mode.name", "_get_stage_from_forward_mode",
                 "profile_prefix", "stage_suffix", "stage_prefix", "filename_parts)")


def _text(value) -> str:
    return repr(value) if not callable(value) else getattr(value, "__name__", repr(value))


def server_args() -> dict[str, dict]:
    out = {}
    for action in installed.server_parser()._actions:  # argparse has no public list of a parser's actions
        if not action.option_strings or action.dest == "help":
            continue
        entry = {"dest": action.dest, "default": _text(action.default),
                 "choices": sorted(map(str, action.choices)) if action.choices else None,
                 "nargs": _text(action.nargs) if action.nargs is not None else None}
        if type(action).__name__.startswith("Deprecated"):
            entry["deprecated"] = getattr(action, "new_flag", None) or True
        for option in action.option_strings:
            out[option] = entry
    return dict(sorted(out.items()))


def environment() -> dict[str, dict]:
    fields, deprecated = check.declared_envs()
    out = {name: {"type": type(field).__name__, "default": _text(field.default)} for name, field in fields.items()}
    for old, new in deprecated.items():
        out.setdefault(old, {})["deprecated"] = new or True
    return dict(sorted(out.items()))


def profile_fields() -> dict[str, str]:
    tree = ast.parse(installed.source(PROFILE_REQ).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("ProfileReqInput", "ProfileReq"):
            return {item.target.id: ast.unparse(item.annotation) + (f" = {ast.unparse(item.value)}" if item.value
                                                                    else "")
                    for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    raise installed.NotInstalled(f"no ProfileReq class in {PROFILE_REQ}")


def profile_route() -> list[str]:
    """The ``@app.api_route``/``@app.post`` lines of /start_profile and /stop_profile."""
    lines = installed.source(HTTP_SERVER).read_text().splitlines()
    return [line.strip() for line in lines if line.lstrip().startswith("@app.") and "_profile\"" in line]


CLIENT = "benchmark/serving.py"


def client_flags() -> list[str]:
    """The option strings of SGLang's benchmark client (``add_argument("--...")`` in benchmark/serving.py, by
    ``ast``: the client is not imported), and the dataset names its ``--dataset-name`` offers there."""
    tree = ast.parse(installed.source(CLIENT).read_text())
    return sorted({arg.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and getattr(node.func, "attr", None) == "add_argument"
                   for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")})


def trace_lines() -> dict[str, list[str]]:
    out = {}
    for relative in TRACE_FILES:
        try:
            text = installed.source(relative).read_text()
        except installed.NotInstalled:
            out[relative] = []
            continue
        out[relative] = [line.strip() for line in text.splitlines()
                         if any(marker in line for marker in TRACE_MARKERS) and not line.strip().startswith("#")]
    return out


def run() -> dict:
    from .release import SHIMS

    return {"ok": True, "engine": "sglang", "sglang": installed.info(), "shims": list(SHIMS),
            "server_args": server_args(), "env": environment(), "profile_request": profile_fields(),
            "profile_routes": profile_route(), "trace_name_lines": trace_lines(), "client_flags": client_flags()}
