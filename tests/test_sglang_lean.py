"""SGLang imported lean (tools/engines/sglang/lean.py: the package registered without its __init__) gives the
same server-argument parser, the same parse of every shipped SGLang target's arguments and levers, and the same
declared environment variables as the whole package, in a process of each kind; and the lean one is lean: the
frontend API and transformers were not imported."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from conftest import DATA, ROOT

TARGETS = [ROOT / "agent" / "targets" / "dsv4-flash-sglang.yaml", DATA / "targets" / "dsv4-flash-sglang-pd.yaml"]

# Run in a fresh Python: argv[1] "lean" or "full", argv[2] the command lines (JSON); prints what it read.
PROBE = r"""
import json, sys
if sys.argv[1] == "lean":
    from tools.engines.sglang.lean import lean
    assert lean()
from sglang.srt.server_args import prepare_server_args
from tools.engines.sglang import check, installed

def plain(value):  # a set's order is the process's string hashing's, a function's repr its address
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, value))
    return f"callable {getattr(value, '__qualname__', type(value).__name__)}" if callable(value) else repr(value)

def value(field):
    try:
        return plain(field.get())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

parser = installed.server_parser()
actions = [[a.option_strings, a.dest, plain(a.default), plain(a.choices), repr(a.nargs)] for a in parser._actions]
parsed = []
for argv in json.loads(sys.argv[2]):
    try:
        args = prepare_server_args(argv)  # a msgspec Struct
        parsed.append({name: plain(getattr(args, name)) for name in args.__struct_fields__})
    except BaseException as exc:  # a refused argument is a result too: argparse's exit, __post_init__'s error
        parsed.append(f"{type(exc).__name__}: {exc}")
fields, deprecated = check.declared_envs()
envs = {name: [type(field).__name__, plain(field.default), value(field)] for name, field in sorted(fields.items())}
print(json.dumps({"actions": actions, "parsed": parsed, "envs": envs, "deprecated": deprecated,
                  "frontend": "sglang.lang" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def _command_lines() -> list[list[str]]:
    """Each target's server command line, then it with each flag lever's arguments (each side's for a
    disaggregated target)."""
    lines = []
    for path in TARGETS:
        target = yaml.safe_load(path.read_text())
        server = target["engine"]["server"]
        base = ["--model-path", server["model_path"], "--load-format", server["load_format"], *server["args"]]
        sides = target["engine"].get("disaggregation") or {}
        bases = [base] + [[*base, *sides[side]["args"]] for side in ("prefill", "decode") if side in sides]
        lines += bases
        lines += [[*bases[-1], *lever["args"]] for lever in target["levers"] if lever["kind"] == "flag"]
    return lines


def _probe(mode: str, lines: list[list[str]]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode, json.dumps(lines)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_lean_import_parses_every_shipped_sglang_command_line_as_the_whole_package_does():
    lines = _command_lines()
    assert len(lines) > 10  # both targets, their levers
    lean, full = _probe("lean", lines), _probe("full", lines)
    assert not lean["frontend"] and not lean["transformers"], lean  # what the lean import leaves out
    assert full["frontend"] and full["transformers"], full  # ...which the whole package imports
    for key in ("actions", "parsed", "envs", "deprecated"):
        assert lean[key] == full[key], key
    assert sum(isinstance(p, dict) for p in lean["parsed"]) > 10  # most lines parse: the comparison is of values


def test_lean_does_nothing_where_sglang_was_imported_already():
    out = subprocess.run([sys.executable, "-c", "import sglang.srt.environ\nfrom tools.engines.sglang.lean import lean\n"
                          "import sglang\nprint(lean(), hasattr(sglang, 'gen'))"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["False", "True"], out.stderr[-3000:]
