"""``check``: a deployment's server arguments and environment against the installed SGLang's own definitions.

Arguments go through SGLang's parser (installed.server_parser): unknown, ambiguous (a prefix several flags
share) and malformed arguments are its own errors; an argument whose action is one of SGLang's
``Deprecated*Action`` classes (sglang/srt/arg_groups/argparse_actions.py) is refused naming the action's
``new_flag``, although SGLang itself would only warn. SGLANG_* variables go against the ``EnvField``s that
``sglang.srt.environ.Envs`` declares, each value through that field's own ``parse`` (SGLang warns and uses the
default on a bad one); NCCL_*, CUDA_*, TORCH_* against known_env.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from . import installed, known_env
from .lean import lean

PREFIXES = ("SGLANG_",) + tuple(known_env.FAMILIES)
_WARN_ONLY = "SGLang itself would only warn"


def problem(where: str, item: str, error: str, replacement: str | None = None) -> dict:
    return {"where": where, "item": item, "error": " ".join(error.split()), "replacement": replacement}


# --- arguments ---------------------------------------------------------------------------------------------

def _recording(parser) -> list[tuple[str, Any]]:
    """Make every deprecated action of ``parser`` note ``(option_string, action)`` when it is used (each
    still does what SGLang's does: warn, store, or stop with its error_message)."""
    used: list[tuple[str, Any]] = []
    for action in parser._actions:  # argparse has no public list of a parser's actions
        cls = type(action)
        if not cls.__name__.startswith("Deprecated"):
            continue

        def __call__(self, parser_, namespace, values, option_string=None, _cls=cls):
            used.append((option_string, self))
            return _cls.__call__(self, parser_, namespace, values, option_string)

        action.__class__ = type(f"Recorded{cls.__name__}", (cls,), {"__call__": __call__})
    return used


_ITEM = [re.compile(r"ambiguous option: (--?[^\s=]+)"), re.compile(r"argument ([^\s:]+)"),
         re.compile(r"unrecognized arguments: (\S+)"), re.compile(r"arguments are required: ([^\s,]+)")]


def _item_of(message: str) -> str:
    for pattern in _ITEM:
        match = pattern.search(message)
        if match:
            return match.group(1).split("/")[0]
    return ""


def parse_problems(argv: list[str], where: str, version: str | None, parser=None) -> list[dict]:
    """The problems SGLang's parser (or ``parser``) finds in ``argv`` (a whole command line), deprecated ones first."""
    parser = parser or installed.server_parser()
    used = _recording(parser)
    found = []
    try:
        parser.parse_args(list(argv))
        error = None
    except installed.ParseError as exc:
        error = str(exc)
    for option, action in used:
        new_flag = getattr(action, "new_flag", None)
        message = getattr(action, "error_message", None) or (
            f"{option} is deprecated in SGLang {version}; {_WARN_ONLY}, the check refuses it"
            + (f": use {new_flag}" if new_flag else ""))
        found.append(problem(where, option, message, new_flag))
    if error is not None and not any(error == p["error"] for p in found):
        found.append(problem(where, _item_of(error), error))
    return found


# What a lever's arguments are parsed after when the server args themselves do not parse: the one argument
# SGLang requires, so the lever's own problems still show.
_PLACEHOLDER_BASE = ["--model-path", "(the target's model)"]


def args_problems(server_args: list[str], levers: list[dict], version: str | None) -> list[dict]:
    """Server args alone, then each lever's args after them (as the lever launches), its own problems only."""
    base = parse_problems(server_args, "server args", version)
    found = list(base)
    prefix = list(server_args) if not base else list(_PLACEHOLDER_BASE)
    seen = {(p["item"], p["error"]) for p in base}
    for lever in levers:
        if not lever.get("args"):
            continue
        for p in parse_problems(prefix + list(lever["args"]), f"lever {lever['name']}", version):
            if (p["item"], p["error"]) not in seen:
                found.append(p)
    return found


# --- a disaggregated deployment (tools/engines/sglang/disagg.py launches it) --------------------------------

# What the disaggregation tool picks at launch (a bootstrap port, the servers' URLs), as placeholders, so that the
# check parses each process's command line as disagg.side_args and disagg.router_args build it.
_BOOTSTRAP = 8998


def _router_tool_args() -> list[str]:
    return ["--pd-disaggregation", "--prefill", "http://127.0.0.1:30001", str(_BOOTSTRAP), "--decode",
            "http://127.0.0.1:30002"]


def router_problems(args: list[str]) -> list[dict]:
    """The router's arguments as launched, through the installed sglang-router's own parser and its RouterArgs."""
    try:
        parser = installed.router_parser()
    except installed.NotInstalled as exc:
        return [problem("router", "sglang-router", f"{exc}; the disaggregated deployment's router is that package's "
                        f"(pip install sglang-router beside SGLang)")]
    argv = _router_tool_args() + list(args)
    found = parse_problems(argv, "router args", installed.version("sglang-router"), parser)
    if found:
        return found
    from sglang_router.router_args import RouterArgs
    try:  # its own conversion (prefill/decode URL lists, selectors, key lists) raises on what the parser lets by
        RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)
    except (ValueError, TypeError) as exc:
        found.append(problem("router args", "", f"sglang-router refuses them: {exc}"))
    return found


def disagg_problems(spec: dict, levers: list[dict], version: str | None, fields: dict, deprecated: dict) -> list[dict]:
    """Each server's command line as the disaggregation tool launches it (disagg.side_args: the deployment's args,
    its side's, a lever's on the side(s) ``levers_on`` names, its role and transfer backend), each side's
    environment, and the router's arguments. Problems the deployment's own args already have are not repeated."""
    from . import disagg

    dis = disagg.validate(spec)
    seen = {(p["item"], p["error"]) for p in parse_problems(list(spec.get("server_args") or []), "server args", version)}
    found: list[dict] = []

    def add(items: list[dict]) -> None:
        for p in items:
            if (p["item"], p["error"]) not in seen:
                seen.add((p["item"], p["error"]))
                found.append(p)

    # where a side's own arguments do not parse, a lever's are parsed after the one argument SGLang requires
    bare_spec = {"server_args": list(_PLACEHOLDER_BASE)}
    for side in disagg.SIDES:
        own = parse_problems(disagg.side_args(spec, dis, {}, side, _BOOTSTRAP), f"{side} server args", version)
        for p in own:  # the tool passes it, from the target's disaggregation.transfer_backend
            if p["item"] == "--disaggregation-transfer-backend":
                p["where"] = "disaggregation.transfer_backend"
        add(own)
        if disagg.gets_lever(dis, side):
            on, on_dis = (spec, dis) if not own else (bare_spec, {**dis, side: {"args": [], "env": {}},
                                                                  "transfer_backend": "mooncake"})
            for lever in levers:
                if lever.get("args"):
                    add(parse_problems(disagg.side_args(on, on_dis, {"args": lever["args"]}, side, _BOOTSTRAP),
                                       f"lever {lever['name']} ({side} server)", version))
        found += env_problems(dict(dis[side]["env"]), lambda name, s=side: f"{s} server env {name}", fields, deprecated)
    add(router_problems(list(dis["router"]["args"])))
    return found


# --- environment -------------------------------------------------------------------------------------------

def declared_envs() -> tuple[dict[str, Any], dict[str, str | None]]:
    """``({name: EnvField}, {deprecated name: replacement or None})`` from the installed sglang.srt.environ."""
    lean()
    from sglang.srt import environ

    fields = {name: value for name, value in vars(environ.Envs).items() if isinstance(value, environ.EnvField)}
    deprecated = {field.deprecated_name: name for name, field in fields.items() if getattr(field, "deprecated_name", None)}
    for old, entry in getattr(environ, "_DEPRECATED_ENVS", {}).items():
        deprecated[old] = entry.replacement
    return fields, deprecated


_SM120_FILE = "kernels/ops/attention/flash_mla_sm120.py"


def sm120_backends(default: str) -> set[str]:
    """SGLANG_SM120_FLASHMLA_BACKEND's accepted values, read from the installed source: the field's default
    (environ.py ``EnvStr("flashinfer")``), the strings flash_mla_sm120.py compares the value with
    (``_sm120_default_backend == "triton"``, ...) and the fallbacks its comment names
    (``SGLANG_SM120_FLASHMLA_BACKEND=triton|torch``: any value not compared lands in the torch fallback)."""
    path = installed.source(_SM120_FILE)
    text = path.read_text()
    tree = ast.parse(text)
    holders = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and "SGLANG_SM120_FLASHMLA_BACKEND"
               in ast.unparse(node.value) for t in node.targets if isinstance(t, ast.Name)}
    compared = {c.value for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Name) and node.left.id in holders
                for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    named = {v for m in re.finditer(r"SGLANG_SM120_FLASHMLA_BACKEND=([\w|]+)", text) for v in m.group(1).split("|")}
    if not compared or not named:
        raise installed.NotInstalled(f"cannot read SGLANG_SM120_FLASHMLA_BACKEND's values from {path}")
    return {default} | compared | named


# A variable whose values SGLang does not check itself (EnvStr takes anything) but sends silently elsewhere.
VALUE_SETS = {"SGLANG_SM120_FLASHMLA_BACKEND": sm120_backends}


def _sglang_env_problem(name: str, value: str, where: str, fields: dict, deprecated: dict) -> dict | None:
    if name in deprecated:
        new = deprecated[name]
        return problem(where, f"{name}={value}", f"{name} is deprecated in the installed SGLang; {_WARN_ONLY}, the "
                       f"check refuses it" + (f": use {new}" if new else " (no replacement)"), new)
    field = fields.get(name)
    if field is None:
        return problem(where, f"{name}={value}", f"{name} is not an environment variable the installed SGLang "
                       f"declares (sglang.srt.environ.Envs)")
    try:
        field.parse(value)
    except ValueError as exc:
        return problem(where, f"{name}={value}", f"{name}: {exc}; SGLang would warn and use its default "
                       f"{field.default!r}")
    if name in VALUE_SETS:
        accepted = VALUE_SETS[name](field.default)
        if value not in accepted:
            return problem(where, f"{name}={value}", f"{name}={value} is not one of {', '.join(sorted(accepted))}; "
                           f"SGLang would send it silently to its fallback")
    return None


def env_problems(env: dict[str, str], where_of, fields: dict, deprecated: dict) -> list[dict]:
    """Problems of the variables of ``env``; ``where_of(name)`` names where each came from."""
    found = []
    for name, value in env.items():
        where, value = where_of(name), str(value)
        if name.startswith("SGLANG_"):
            p = _sglang_env_problem(name, value, where, fields, deprecated)
        else:
            p = _family_problem(name, value, where)
        if p:
            found.append(p)
    return found


def _family_problem(name: str, value: str, where: str) -> dict | None:
    family = next((f for f in known_env.FAMILIES if name.startswith(f)), None)
    if family is None:
        return None  # no registry of other names on the box: passed as given
    names, source = known_env.FAMILIES[family]
    if name not in names:
        return problem(where, f"{name}={value}", f"{name} is not among {source} (tools/engines/sglang/known_env.py)")
    error = known_env.nccl_value_error(name, value)
    return problem(where, f"{name}={value}", error) if error else None


def run(spec: dict) -> dict:
    """The check's result: ``ok`` when no problem; ``problems`` one a finding (check's documented shape)."""
    info = installed.info()
    levers = spec.get("levers") or []
    # a disaggregated deployment's levers are parsed on the server(s) they launch with (disagg_problems)
    found = args_problems(list(spec.get("server_args") or []), [] if spec.get("disaggregation") else levers,
                          info["version"])
    fields, deprecated = declared_envs()
    found += env_problems(dict(spec.get("env") or {}), lambda name: f"env {name}", fields, deprecated)
    for lever in levers:
        found += env_problems(dict(lever.get("env") or {}), lambda name, n=lever["name"]: f"lever {n}", fields,
                              deprecated)
    if spec.get("disaggregation"):
        found += disagg_problems(spec, levers, info["version"], fields, deprecated)
    return {"ok": not found, "engine": "sglang", "sglang": info, "problems": found}
