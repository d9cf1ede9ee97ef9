"""fallbacks_for_kernels(): tie profiled kernel names to the gates that lead to them.

For each kernel: its definition in the tree (a Triton `@triton.jit def NAME` or a Python function),
its callers found by walking up the call graph (names resolved through each module's imports;
`self.attr = partial(f, ...)` aliases followed), and the gate branches along every path. A path is
reached on the SM when every gate on it admits the branch it needs; environment variables on the
path become levers with the values that open it, and the other branch of each architecture gate is
the path other architectures take instead.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .index import mentions
from .labels import text
from .model import Gate, GateScan
from .scan import scan
from .sites import Place, walk_places
from .table import gate_verdict
from .verdicts import ScanState, Site, verdict

MAX_DEPTH = 7
MAX_FUNCTIONS = 48
MAX_CALLERS = 12
MAX_PATHS = 24
COMMON_METHOD_DEFS = 2  # a method name defined in more classes than this is not followed by name alone
ARGS_CLASS = re.compile(r"(ServerArgs|Args|Config)$")


@dataclass
class TieGate:
    at: str
    test: str
    branch: bool  # the side of the test the path needs
    kind: str
    verdict: str  # of the test on the SM: true | maybe | false | unknown
    ok: bool | None  # whether the needed side can be taken on the SM
    sms: list  # SMs on which the needed side can be taken
    scanned: bool  # a gate of the scan (False: evaluated here)
    # [{"name", "default", "defined_at", "opens": [values that let the needed side be taken],
    #   "closes": [values that rule it out], "decides": whether the variable's value can open or close the path here}]
    env: list
    other: dict  # the other side: {"kind", "names", "text"}


@dataclass
class TiePath:
    chain: list  # [{"function", "at"}], kernel first
    gates: list  # [TieGate], innermost first
    conditions: list  # other tests on the path (source text)
    reached: bool | None  # with the environment at its defaults
    blocked_by: str | None  # "arch" | "env" | None: what closes the path on this SM
    env_to_reach: dict  # NAME -> [values] that open every environment gate on the path (when only env blocks it)


@dataclass
class KernelTie:
    kernel: str
    defined_at: str | None
    kind: str | None  # "triton" | "function"
    reached: bool | None  # on this SM with the environment at its defaults
    reachable: bool | None  # on this SM once the environment levers are set (architecture allows it)
    env_to_reach: dict  # NAME -> [values] opening a path when the defaults do not
    fallback: bool  # reachable on this SM while other architectures take another path at an arch gate
    replaced_on: list  # those other SMs
    alternatives: list  # other side of each architecture gate on reachable paths: {"at","test","needed","names","text","sms"}
    instead: list  # on this SM, where an architecture gate turns away from the kernel: what runs instead
    levers: list  # [{"env": ...} | {"flag": ...}]
    paths: list
    unresolved: list = field(default_factory=list)


@dataclass(frozen=True)
class _Target:
    module: str
    name: str
    cls: str | None  # qualified class name for methods and instance attributes
    kind: str  # function | method | attr
    node_id: int = 0


@dataclass
class _Edge:
    caller: tuple  # (module, qualname, node) or (module, None, None) at module level
    place: Place


def _state(scan_result: GateScan) -> ScanState:
    if scan_result.state is None:
        # A scan loaded from JSON: rebuild the live side from the same tree.
        fresh = scan(scan_result.root, sms=tuple(scan_result.sm_versions), cuda=scan_result.cuda)
        scan_result.state = fresh.state
    return scan_result.state


def fallbacks_for_kernels(scan_result: GateScan, sm: int, kernel_names: list[str]) -> list[KernelTie]:
    """For each profiled kernel name: where it is defined, the gate branches that lead to it, whether
    `sm` reaches it (default environment), the environment variables that choose it (levers), and
    the paths other architectures take at each architecture gate on the way. Static and
    best-effort: what could not be followed is listed in `unresolved`."""
    state = _state(scan_result)
    return [_tie(state, sm, name) for name in kernel_names]


def _definitions(state: ScanState, name: str) -> list:
    found = []
    for module, summary in sorted(state.project.summaries.items()):
        for d in summary.defs:
            if d.name == name:
                found.append((module, d.qualname, d.line))
    return found


def _def_node(state: ScanState, module: str, qualname: str):
    tree = state.project.tree(module)
    if tree is None:
        return None
    parts = qualname.split(".")
    body = tree.body
    node = None
    for part in parts:
        node = next(
            (n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def _is_triton(node: ast.AST) -> bool:
    for deco in getattr(node, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = text(target)
        if name.split(".")[-1] in ("jit", "autotune", "heuristics") or name.startswith("triton"):
            return True
    return False


def _tie(state: ScanState, sm: int, kernel: str) -> KernelTie:
    definitions = _definitions(state, kernel)
    if not definitions:
        return KernelTie(kernel, None, None, None, None, {}, False, [], [], [], [], [], [f"no definition of {kernel!r} in the tree"])
    unresolved = []
    if len(definitions) > 1:
        unresolved.append(
            f"{kernel!r} is defined {len(definitions)} times; following all: "
            + ", ".join(f"{state.project.files[m].rel}:{line}" for m, _, line in definitions)
        )
    paths: list = []
    defined_at = None
    kind = None
    for module, qualname, line in definitions:
        node = _def_node(state, module, qualname)
        rel = state.project.files[module].rel
        if defined_at is None:
            defined_at = f"{rel}:{line}"
            kind = "triton" if node is not None and _is_triton(node) else "function"
        cls = qualname.rsplit(".", 1)[0] if "." in qualname else None
        target = _Target(module, kernel, cls, "method" if cls else "function")
        graph: dict = {}
        _climb(state, target, graph, unresolved)
        signatures = set()
        for chain in _paths(graph, target):
            path = _path(state, sm, target, chain, f"{rel}:{line}")
            signature = (tuple(c["function"] for c in path.chain), tuple((g.at, g.branch) for g in path.gates))
            if signature in signatures:
                continue
            signatures.add(signature)
            paths.append(path)
            if len(paths) >= MAX_PATHS:
                unresolved.append(f"more than {MAX_PATHS} paths to {kernel!r}; the rest are not listed")
                break
    reached = _any_state([p.reached for p in paths])
    reachable = _any_state([p.reached if p.blocked_by != "env" or not p.env_to_reach else True for p in paths])
    env_to_reach: dict = {}
    if not reached:
        for path in paths:
            if path.blocked_by == "env" and path.env_to_reach:
                for name, values in path.env_to_reach.items():
                    env_to_reach.setdefault(name, set()).update(values)
    alternatives, replaced_on = _alternatives(paths, sm, state.sms)
    instead = []
    for path in paths:
        for gate in path.gates:
            if gate.kind != "env" and gate.ok is False:
                entry = {"at": gate.at, "test": gate.test, "names": gate.other["names"], "text": gate.other["text"]}
                if entry not in instead:
                    instead.append(entry)
    return KernelTie(
        kernel=kernel,
        defined_at=defined_at,
        kind=kind,
        reached=reached,
        reachable=reachable,
        env_to_reach={k: sorted(v) for k, v in sorted(env_to_reach.items())},
        fallback=bool(reachable and replaced_on),
        replaced_on=replaced_on if reachable else [],
        alternatives=alternatives,
        instead=instead,
        levers=_levers(state, paths),
        paths=paths,
        unresolved=unresolved,
    )


def _any_state(values: list) -> bool | None:
    if not values:
        return None
    if any(v is True for v in values):
        return True
    if all(v is False for v in values):
        return False
    return None


# ----------------------------------------------------------------- the call graph


def _climb(state: ScanState, start: _Target, graph: dict, unresolved: list) -> None:
    """Breadth-first over callers: graph[target] = [(caller target or None, edge)]."""
    frontier = [start]
    seen = {start}
    depth = 0
    while frontier and depth < MAX_DEPTH and len(seen) < MAX_FUNCTIONS:
        next_frontier = []
        for target in frontier:
            edges = _references(state, target, unresolved)
            graph[target] = []
            for caller, edge in edges[:MAX_CALLERS]:
                graph[target].append((caller, edge))
                if caller is not None and caller not in seen:
                    seen.add(caller)
                    next_frontier.append(caller)
            if len(edges) > MAX_CALLERS:
                unresolved.append(f"{target.name}: {len(edges)} references, first {MAX_CALLERS} followed")
        frontier = next_frontier
        depth += 1


def _method_defs(state: ScanState, name: str) -> int:
    return len(state.project.method_definitions(name))


def _references(state: ScanState, target: _Target, unresolved: list) -> list:
    """(caller target, edge) for every place that refers to `target`."""
    project = state.project
    resolver = project.resolver
    qualified = f"{target.module}.{target.name}"
    follow_attr_anywhere = target.kind in ("method", "attr") and _method_defs(state, target.name) <= COMMON_METHOD_DEFS
    out = []
    for module, summary in sorted(project.summaries.items()):
        if target.name not in summary.names and target.name not in summary.attrs:
            continue
        aliases = {
            local
            for local, imported in summary.imports.items()
            if imported == qualified or resolver.canonical(imported) == qualified
        }
        module_aliases = {
            local for local, imported in summary.imports.items() if imported == target.module or resolver.canonical(imported) == target.module
        }
        if target.kind == "function" and not aliases and not module_aliases and module != target.module:
            continue
        if target.kind != "function" and module != target.module and not follow_attr_anywhere:
            continue
        tree = project.tree(module)
        if tree is None:
            continue

        def want(node, module=module, aliases=aliases, module_aliases=module_aliases):
            if target.kind == "function":
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    return node.id in aliases or (module == target.module and node.id == target.name)
                if isinstance(node, ast.Attribute) and node.attr == target.name and isinstance(node.value, ast.Name):
                    return node.value.id in module_aliases
                return False
            if isinstance(node, ast.Attribute) and node.attr == target.name and isinstance(node.ctx, ast.Load):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    return True
                return follow_attr_anywhere
            return False

        for place in walk_places(tree, module, want):
            if target.kind != "function" and module == target.module and isinstance(place.node.value, ast.Name) and place.node.value.id in ("self", "cls"):
                if target.cls and place.cls is not None and place.cls.qualname != target.cls and not follow_attr_anywhere:
                    continue
            for caller in _callers_of(state, module, place, target):
                out.append((caller, _Edge((module, place.qualname), place)))
    return out


def _callers_of(state: ScanState, module: str, place: Place, target: _Target) -> list:
    """The target(s) the next level climbs from: the enclosing function, or an instance attribute
    the reference is stored in (`self.x = partial(f, ...)` makes callers of `self.x` callers of f)."""
    if not place.chain:
        return [None]
    fn = place.chain[-1]
    stored = _stored_in_self(fn, place.node)
    if stored is not None and place.cls is not None:
        return [_Target(module, stored, place.cls.qualname, "attr")]
    cls = place.cls.qualname if place.cls is not None and place.qualname and place.qualname.rsplit(".", 1)[0] == place.cls.qualname else None
    if fn.name == target.name and cls == target.cls and module == target.module:
        return []  # recursion
    return [_Target(module, fn.name, cls, "method" if cls else "function", id(fn))]


def _stored_in_self(fn: ast.AST, node: ast.AST) -> str | None:
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            t = stmt.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                if any(sub is node for sub in ast.walk(stmt.value)):
                    return t.attr
    return None


def _paths(graph: dict, start: _Target) -> list:
    """Every chain of edges from the kernel to a root (no caller found, or the climb stopped)."""
    out: list = []

    def walk(target, edges, visited):
        if len(out) >= MAX_PATHS:
            return
        callers = graph.get(target)
        if not callers:
            if edges:
                out.append(list(edges))
            return
        for caller, edge in callers:
            if caller is not None and caller in visited:
                continue
            if caller is None:
                out.append(list(edges) + [edge])
                continue
            walk(caller, edges + [edge], visited | {caller})

    walk(start, [], {start})
    return out


# ----------------------------------------------------------------- gates along a path


def _gate_for(state: ScanState, module: str, test: ast.AST) -> Gate | None:
    rel = state.project.files[module].rel
    return state.gate_index.get((rel, test.lineno, test.col_offset))


def _env_candidates(state: ScanState, name: str, default, test: ast.AST) -> set:
    """String values the tree compares an environment variable against (this test's literals and
    every scanned gate reading it); "1"/"0" for switches whose default is not a string."""
    values = {"1", "0"} if not isinstance(default, str) or default.lower() in ("0", "1", "true", "false", "") else set()
    for sub in ast.walk(test):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and 0 < len(sub.value) <= 40:
            values.add(sub.value)
    for gate in state.gate_index.values():
        for use in gate.env:
            if use.name == name:
                values.update(v for v in use.passes_with if v != "<default>")
                values.update(re.findall(r"'([^'\s]{1,40})'", gate.test))
    return values


def _path(state: ScanState, sm: int, target: _Target, edges: list, defined_at: str) -> TiePath:
    chain = [{"function": target.name, "at": defined_at}]
    gates: list = []
    conditions: list = []
    for edge in edges:
        place = edge.place
        module = place.module
        rel = state.project.files[module].rel
        chain.append({"function": place.qualname or "<module>", "at": f"{rel}:{place.node.lineno}"})
        site = Site(module, place.chain, place.cls, place.qualname)
        for test, branch in reversed(place.conds):
            tie = _tie_gate(state, sm, module, site, test, branch)
            if tie is None:
                if len(conditions) < 8:
                    conditions.append(f"{'' if branch else 'not '}{text(test)} ({rel}:{test.lineno})")
            else:
                gates.append(tie)
    oks = [g.ok for g in gates]
    reached = False if any(o is False for o in oks) else (None if any(o is None for o in oks) else True)
    blocked_by = None
    env_to_reach: dict = {}
    if reached is False:
        closed = [g for g in gates if g.ok is False]
        if any(not g.env for g in closed) or any(g.kind != "env" and g.ok is False for g in gates):
            blocked_by = "arch"
        else:
            blocked_by = "env"
            # For each variable of a closed gate: the values that put every gate reading it on the
            # side the path needs (gates it leaves open at its default do not ask for a value).
            needed = {use["name"] for g in closed for use in g.env}
            for g in gates:
                for use in g.env:
                    if use["name"] not in needed:
                        continue
                    current = env_to_reach.get(use["name"])
                    opens = set(use["opens"])
                    env_to_reach[use["name"]] = opens if current is None else current & opens
            if any(not values for values in env_to_reach.values()):
                env_to_reach = {}
    return TiePath(
        chain=chain,
        gates=gates,
        conditions=conditions,
        reached=reached,
        blocked_by=blocked_by,
        env_to_reach={k: sorted(v) for k, v in sorted(env_to_reach.items())},
    )


def _tie_gate(state: ScanState, sm: int, module: str, site: Site, test: ast.AST, branch: bool) -> TieGate | None:
    rel = state.project.files[module].rel
    gate = _gate_for(state, module, test)
    if gate is not None:
        verdicts = {s: gate_verdict(gate, s) for s in state.sms}
        kind = gate.kind
        other = gate.when_false if branch else gate.when_true
        env_reads = {u.name: u for u in gate.env}
        scanned = True
    else:
        names, attrs = mentions(test)
        summary = state.project.summaries.get(module)
        if summary is None or not any(state.project.relevance.classify(summary, names, attrs)):
            return None
        verdicts, _, effects = state.verdicts(test, site)
        if len(set(verdicts.values())) == 1 and not effects.env_reads:
            return None
        kind = "env" if len(set(verdicts.values())) == 1 else "call"
        other = None
        env_reads = {name: read for name, read in effects.env_reads.items()}
        scanned = False
    needed = ("true", "maybe") if branch else ("false", "maybe")
    v = verdicts[sm]
    ok = None if v == "unknown" else v in needed
    env = []
    for name, read in sorted(env_reads.items()):
        opens, closes = [], []
        for value in sorted(_env_candidates(state, name, read.default, test)):
            ev, _ = state.evaluate(test, site, sm, {name: value})
            x = verdict(ev)
            if x in needed:
                opens.append(value)
            elif x != "unknown":
                closes.append(value)
        # A variable every value of which leaves the needed side open (a prefill switch on the
        # decode path's fall-through side) does not choose this kernel: not a lever of it.
        decides = bool(closes) or (ok is False and bool(opens))
        env.append({"name": name, "default": read.default, "defined_at": read.defined_at, "opens": opens,
                    "closes": closes, "decides": decides})
    if other is None:
        other_path = {"kind": "unknown", "names": [], "text": ""}
    else:
        other_path = {"kind": other.kind, "names": list(other.names), "text": other.text}
    return TieGate(
        at=f"{rel}:{test.lineno}",
        test=text(test),
        branch=branch,
        kind=kind,
        verdict=v,
        ok=ok,
        sms=sorted(s for s, x in verdicts.items() if x in needed),
        scanned=scanned,
        env=env,
        other=other_path,
    )



def _alternatives(paths: list, sm: int, universe: tuple) -> tuple[list, list]:
    """The other side of every architecture gate on the paths that can be reached, with the SMs
    that take it (those that cannot take the side the path needs)."""
    out = {}
    replaced: set = set()
    for path in paths:
        if path.blocked_by == "arch" or path.reached is False and not path.env_to_reach:
            continue
        for gate in path.gates:
            if gate.kind == "env":
                continue
            others = sorted(s for s in universe if s not in gate.sms)
            if not others:
                continue
            replaced.update(others)
            key = (gate.at, gate.test)
            if key not in out:
                out[key] = {
                    "at": gate.at,
                    "test": gate.test,
                    "needed": gate.branch,
                    "names": gate.other["names"],
                    "text": gate.other["text"],
                    "sms": others,
                }
    return [out[k] for k in sorted(out)], sorted(replaced - {sm})


def _levers(state: ScanState, paths: list) -> list:
    """Environment variables and server flags that choose between the paths: a variable is a lever
    only where some value of it opens or closes the side of a gate the path needs."""
    envs: dict = {}
    flags: dict = {}
    fields = _args_fields(state)
    for path in paths:
        for gate in path.gates:
            for use in gate.env:
                if not use.get("decides", True):
                    continue
                entry = envs.setdefault(
                    use["name"], {"env": use["name"], "default": use["default"], "defined_at": use["defined_at"], "opens": set(), "at": set()}
                )
                entry["opens"].update(use["opens"])
                entry["at"].add(gate.at)
            for attr in re.findall(r"\.(\w+)", gate.test):
                if attr in fields:
                    flags.setdefault(attr, {"flag": "--" + attr.replace("_", "-"), "field": attr, "defined_at": fields[attr], "at": set()})["at"].add(gate.at)
        for condition in path.conditions:
            for attr in re.findall(r"\.(\w+)", condition):
                if attr in fields:
                    flags.setdefault(attr, {"flag": "--" + attr.replace("_", "-"), "field": attr, "defined_at": fields[attr], "at": set()})["at"].add(condition.rsplit("(", 1)[-1].rstrip(")"))
    out = []
    for entry in envs.values():
        entry["opens"] = sorted(entry["opens"])
        entry["at"] = sorted(entry["at"])
        out.append(entry)
    for entry in flags.values():
        entry["at"] = sorted(entry["at"])
        out.append(entry)
    return sorted(out, key=lambda e: (0 if "env" in e else 1, e.get("env") or e.get("flag")))


def _args_fields(state: ScanState) -> dict:
    """Annotated fields of the tree's argument classes (names ending in Args/ServerArgs/Config in
    files whose path mentions args): server flags are their dashed names."""
    cached = getattr(state, "_args_fields", None)
    if cached is not None:
        return cached
    fields: dict = {}
    for summary in state.project.summaries.values():
        if "args" not in summary.rel and "arg_groups" not in summary.rel:
            continue
        for info in summary.classes:
            if not ARGS_CLASS.search(info.name) and "fields" not in summary.rel:
                continue
            for name, _, line in info.fields:
                if not name.startswith("_") and name not in fields:
                    fields[name] = f"{summary.rel}:{line}"
    state._args_fields = fields
    return fields


def tie_to_dict(tie: KernelTie) -> dict:
    from .model import _jsonable

    return _jsonable(tie)
