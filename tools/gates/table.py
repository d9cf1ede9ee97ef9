"""evaluate(): the gate table of a scan for one SM (and optionally non-default environment)."""

from __future__ import annotations

from .model import EXITS, Gate, GateRow, GateScan
from .sites import locate
from .verdicts import ScanState, Site, verdict


def gate_verdict(gate: Gate, sm: int) -> str:
    """'true' | 'maybe' | 'false' | 'unknown' for a scanned gate on `sm` (default environment)."""
    if sm in gate.sms_true:
        return "true"
    if sm in gate.sms_maybe:
        return "maybe"
    if sm in gate.sms_unknown:
        return "unknown"
    return "false"


def live_verdict(state: ScanState, gate: Gate, sm: int, env: dict) -> str | None:
    """Re-evaluate a gate's test in place under `env` (needs the scan's live state)."""
    file = next((f for f in state.project.files.values() if f.rel == gate.file), None)
    if file is None:
        return None
    tree = state.project.tree(file.name)
    if tree is None:
        return None
    col = int(gate.id.rsplit(":", 1)[1])
    place = locate(tree, file.name, gate.line, col)
    if place is None:
        return None
    value, _ = state.evaluate(place.node, Site(file.name, place.chain, place.cls, place.qualname), sm, env)
    return verdict(value)


def gate_verdict_env(scan: GateScan, gate: Gate, sm: int, env: dict | None) -> str:
    """The gate's verdict on `sm` with the environment variables in `env` set (others at default)."""
    overridden = {u.name: env[u.name] for u in gate.env if env and u.name in env}
    if not overridden:
        return gate_verdict(gate, sm)
    if len(overridden) == 1:
        name, value = next(iter(overridden.items()))
        use = next(u for u in gate.env if u.name == name)
        if str(value) in use.passes_with:
            # passes_with holds the SMs where the test can be true; definite-ness is not kept per value.
            return "maybe" if sm in use.passes_with[str(value)] else "false"
    if scan.state is not None:
        live = live_verdict(scan.state, gate, sm, {k: str(v) for k, v in overridden.items()})
        if live is not None:
            return live
    return "unknown"


def passes_for(role: str, test_verdict: str) -> tuple[bool | None, bool]:
    """(passes, definite) of a gate whose test has `test_verdict` on an SM: an "enables" gate is
    passed where its test can be true, an early-exit guard where it can be false (taking the exit
    shuts the SM out). A "maybe" test passes only if the listed conditions go the right way."""
    if test_verdict == "unknown":
        return None, False
    definite = test_verdict in ("true", "false")
    if role == EXITS:
        return test_verdict in ("false", "maybe"), definite
    return test_verdict in ("true", "maybe"), definite


def decided_by(gate: Gate, universe: list) -> str:
    """"env" when the SM never changes the gate's answer and an environment variable does: the test
    is the same on every SM at the default and at every value the scan tried. Else "sm"."""
    if not gate.env or gate.sms_unknown:
        return "sm"
    every = set(universe)
    same = [set(gate.sms_true), set(gate.sms_maybe)]
    if any(part not in (set(), every) for part in same):
        return "sm"
    for use in gate.env:
        if any(set(sms) not in (set(), every) for sms in use.passes_with.values()):
            return "sm"
    return "env"


def evaluate(scan: GateScan, sm: int, env: dict | None = None) -> list[GateRow]:
    """Every gate of `scan` evaluated for compute capability `sm` (e.g. 90, 100, 120).

    `passes` is True when the architecture lets the SM through to the gated path (for an early-exit
    guard, `role` "exits": past the exit), definitely or depending only on the listed
    non-architectural `conditions` (`definite` tells which); False when it shuts the SM out, None
    when the scan could not tell. `env` sets environment variables (name -> string); variables not
    given are at their defaults.
    """
    if sm not in scan.sm_versions:
        raise ValueError(f"sm {sm} was not evaluated by this scan; scanned: {scan.sm_versions}")
    rows = []
    for gate in scan.gates:
        v = gate_verdict_env(scan, gate, sm, env)
        passes, definite = passes_for(gate.role, v)
        exits = gate.role == EXITS
        rows.append(
            GateRow(
                id=gate.id,
                file=gate.file,
                line=gate.line,
                kind=gate.kind,
                test=gate.test,
                helper=gate.helpers[0].name if gate.helpers else None,
                sms=gate.sms,
                passes=passes,
                definite=definite,
                # What passing leads to: past an early exit, the code it guards (the fall-through).
                guarded=_describe(gate.when_false if exits else gate.when_true),
                alternative=_describe(gate.when_true if exits else gate.when_false),
                conditions=list(gate.conditions),
                env=[u.name for u in gate.env],
                role=gate.role,
                allows=allowed_sms(gate, scan.sm_versions),
                decided_by=decided_by(gate, scan.sm_versions),
            )
        )
    return rows


def allowed_sms(gate: Gate, universe: list) -> list:
    """The SMs that can pass the gate (default environment): where the test can be true for an
    "enables" gate, where it can be false for an early-exit guard."""
    if gate.role != EXITS:
        return gate.sms
    definitely_taken = set(gate.sms_true) | set(gate.sms_unknown)
    return sorted(s for s in universe if s not in definitely_taken)


def _describe(path) -> str:
    if path.names:
        return path.names[0]
    return path.text
