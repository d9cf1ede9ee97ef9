"""The scan's result assembled from the walk: kept gates, helpers evaluated on their own, import
probes, environment switches, what stayed unresolved, and the scanned package's name and version."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace
from pathlib import Path

from .effects import Effects
from .index import looks_arch
from .interp import Interpreter
from .model import EnvSwitch, GateScan, Helper, HelperUse, ImportProbe, Unresolved
from .values import Alts, ClassRef, FuncRef, Instance, PartialRef
from .verdicts import ScanState, verdict
from .walker import Collected, conditions, keep_env_gate


def engine_info(root: Path) -> dict:
    """Package name and installed version of the scanned tree, when it is an installed package."""
    package = root.name if (root / "__init__.py").is_file() else None
    version = None
    if package:
        try:
            dist_files = importlib.metadata.files(package) or []
            if any(Path(str(f)).parts[:1] == (package,) for f in dist_files[:50]):
                version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = None
    return {"package": package, "version": version}


def assemble(state: ScanState, summaries, collected: Collected, root: Path, interpreted: int, scanned: int) -> GateScan:
    """The scan's result from what the walk collected: the gates it keeps (linked to the gates they
    sit under), the helpers they reach evaluated on their own, import probes, environment switches
    and everything left unresolved."""
    kept = [p for p in collected.pending if keep_env_gate(p, p.gate.file)]
    kept_ids = {id(p) for p in kept}
    for p in kept:
        p.gate.under = [{"gate": parent.gate.id, "branch": branch} for parent, branch in p.gate._under if id(parent) in kept_ids]
    helpers = _helpers(state, kept, collected)
    gates = _gates(state, kept, helpers)
    return GateScan(
        root=str(root),
        engine=engine_info(root),
        sm_versions=list(state.sms),
        cuda=state.cuda,
        files_scanned=scanned,
        files_interpreted=interpreted,
        helpers=[helpers[k] for k in sorted(helpers)],
        constants=sorted(collected.constants, key=lambda c: (c.defined_at, c.name)),
        gates=gates,
        import_probes=_probes(summaries, collected, kept_ids),
        env=_switches(gates, collected, kept_ids),
        unresolved=_unresolved(state, collected, helpers),
        state=state,
    )


def _helpers(state: ScanState, kept: list, collected: Collected) -> dict:
    """Every architecture-dependent callable the kept gates and the constants reached, evaluated on
    its own, by where it is defined."""
    helper_keys: dict = {}
    for p in kept:
        helper_keys.update({where: (name, module) for where, (name, _, module) in p.gate._all_helper_keys.items()})
    for effects in collected.constant_keys.values():
        helper_keys.update({where: (name, module) for where, (name, _, module) in effects.helpers.items()})
    helpers = {}
    for where, (name, module) in sorted(helper_keys.items()):
        helper = _evaluate_helper(state, name, module, where)
        if helper is not None:
            helpers[where] = helper
    return helpers


def _gates(state: ScanState, kept: list, helpers: dict) -> list:
    """The kept gates in report order, with the helpers they use, indexed in the live state; the
    walk's private fields are dropped."""
    for p in kept:
        p.gate.helpers = [
            HelperUse(name, where, helpers[where].sms if where in helpers else [])
            for where, (name, _) in sorted(p.gate._helper_keys.items())
        ]
    gates = sorted((p.gate for p in kept), key=lambda g: (g.file, g.line, g.id))
    for gate in gates:
        state.gate_index[(gate.file, gate.line, int(gate.id.rsplit(":", 1)[1]))] = gate
        for attr in ("_helper_keys", "_all_helper_keys", "_under"):
            gate.__dict__.pop(attr, None)
    return gates


def _probes(summaries, collected: Collected, kept_ids: set) -> list:
    """Import probes: walked ones know their enclosing gates; the rest come from the pre-pass."""
    probes = dict(collected.probes)
    for summary in summaries:
        for info in summary.probes:
            pid = f"{summary.rel}:{info.line}:{info.col}"
            if pid not in probes:
                probes[pid] = ImportProbe(pid, summary.rel, info.line, list(info.modules), info.function, [])
    for probe in probes.values():
        under = probe.__dict__.pop("_under", [])
        probe.under = [{"gate": parent.gate.id, "branch": branch} for parent, branch in under if id(parent) in kept_ids]
    return sorted(probes.values(), key=lambda p: (p.file, p.line, p.id))


def _switches(gates: list, collected: Collected, kept_ids: set) -> list:
    """Environment switches read by the gates and constants, with their writes under architecture gates."""
    switches: dict = {}
    for gate in gates:
        for use in gate.env:
            sw = switches.setdefault(use.name, EnvSwitch(use.name, use.default, use.defined_at, [], []))
            sw.read_by.append(gate.id)
            if sw.defined_at is None and use.defined_at:
                sw.defined_at = use.defined_at
    for constant in collected.constants:
        for name in constant.env:
            read = collected.constant_keys[constant.defined_at].env_reads.get(name)
            sw = switches.setdefault(name, EnvSwitch(name, read.default if read else None, read.defined_at if read else None, [], []))
            if constant.defined_at not in sw.read_by:
                sw.read_by.append(constant.defined_at)
    for write in collected.env_writes:
        under = [{"gate": parent.gate.id, "branch": branch} for parent, branch in write["_under"] if id(parent) in kept_ids and parent.arch]
        if not under and not looks_arch(write["name"]) and write["name"] not in switches:
            continue
        sw = switches.setdefault(write["name"], EnvSwitch(write["name"], None, None, [], []))
        sw.set_at.append({"at": write["at"], "value": write["value"], "under": under})
    for sw in switches.values():
        sw.read_by = sorted(set(sw.read_by))
        sw.set_at = sorted(sw.set_at, key=lambda w: (w["at"], w["value"]))
    return sorted(switches.values(), key=lambda s: s.name)


def _unresolved(state: ScanState, collected: Collected, helpers: dict) -> list:
    """What the scan could not resolve, once per (place, text): from the walk, helpers that could
    not be evaluated, and files that did not parse."""
    unresolved: dict = {}
    for u in sorted(collected.unresolved, key=lambda u: (u.at, u.text, u.reason)):
        unresolved.setdefault((u.at, u.text), u)
    for where, helper in helpers.items():
        if not helper.sms and helper.conditions and any("unresolved" in c for c in helper.conditions):
            unresolved.setdefault((where, helper.name), Unresolved(where, helper.name, "helper could not be evaluated"))
    for module, error in sorted(state.project.parse_errors.items()):
        file = state.project.files[module]
        unresolved.setdefault((file.rel, ""), Unresolved(file.rel, "", f"file not parsed: {error}"))
    return sorted(unresolved.values(), key=lambda u: (u.at, u.text, u.reason))


def _evaluate_helper(state: ScanState, name: str, module: str, where: str) -> Helper | None:
    """The helper `name` of `module` called with no arguments on every SM; None when it is not a
    callable the scan finds or its answer never reads the architecture."""
    values: dict = {}
    verdicts: dict = {}
    effects = Effects()
    for sm in state.sms:
        interp = state.interpreter(sm)
        target = _helper_callable(interp, module, name)
        if target is None:
            return None
        value, fx = interp.call_value(target, f"{name}()")
        effects.merge(fx)
        values[sm] = value
        verdicts[sm] = verdict(value)
    if not effects.touched_arch:
        return None
    shown = {}
    if any(isinstance(v, int) and not isinstance(v, bool) for v in values.values()):
        shown = {str(sm): repr(v) if not isinstance(v, Alts) else "one of " + ", ".join(sorted(repr(x) for x in v.values)) for sm, v in values.items()}
    return Helper(
        name=name,
        module=module,
        defined_at=where,
        sms=sorted(sm for sm, v in verdicts.items() if v in ("true", "maybe")),
        sms_definite=sorted(sm for sm, v in verdicts.items() if v == "true"),
        values=shown,
        conditions=conditions(values, verdicts, effects),
        env=sorted(effects.env_reads),
    )


def _helper_callable(interp: Interpreter, module: str, name: str):
    if "." in name:
        class_name, attr = name.rsplit(".", 1)
        cls = interp.global_value(module, class_name.split(".")[0], None)
        if not isinstance(cls, ClassRef):
            return None
        found = interp.class_attr(cls, attr, None, None)
        if not isinstance(found, FuncRef):
            return None
        return found if found.self_value is not None else replace(found, self_value=Instance(cls))
    value = interp.global_value(module, name, None)
    return value if isinstance(value, (FuncRef, PartialRef)) else None
