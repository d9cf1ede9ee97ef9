"""scan(): find the capability gates of an engine source tree, statically.

Pipeline: every .py file is parsed once in worker processes for a pre-pass (names, definitions,
imports); a syntactic closure from the capability/environment primitives picks the files and tests
worth interpreting; each such test is evaluated by the interpreter for every SM in SM_VERSIONS
(only once when it never reads the capability); tests whose answer depends on the SM are gates,
tests that only read environment variables are kept when they select an architecture-specific
path. Helpers, constants, import probes and environment switches are reported beside them.
"""

from __future__ import annotations

import ast
import gc
import importlib.metadata
import multiprocessing
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .index import (
    FileSummary,
    discover,
    looks_arch,
    mentions,
    relevance,
    summarize_all,
    target_names,
)
from .interp import Effects, Interpreter, text
from .model import (
    ENABLES,
    EXITS,
    SM_VERSIONS,
    BranchPath,
    Constant,
    EnvSwitch,
    EnvUse,
    Gate,
    GateScan,
    Helper,
    HelperUse,
    ImportProbe,
    Unresolved,
)
from .project import Project, build_project, resolve_from
from .values import Alts, ClassRef, FuncRef, Instance, PartialRef, truth_of, uncertainty

MAX_CONDITIONS = 12
MAX_NAMES = 8
ENV_TRY_VALUES = ("1", "0")


@contextmanager
def _no_gc():
    # Many AST objects stay alive during a scan; the cyclic collector would re-walk them all on
    # every generation-2 pass and triple the time. Nothing here creates garbage cycles that matter.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def verdict(value: Any) -> str:
    """'true', 'false', 'maybe' (depends on non-architectural conditions) or 'unknown'."""
    truth = truth_of(value)
    if truth is True:
        return "true"
    if truth is False:
        return "false"
    return "unknown" if uncertainty(value)[1] else "maybe"


@dataclass
class ScanState:
    """The live side of a scan: the parsed tree and one interpreter per (SM, environment)."""

    project: Project
    sms: tuple
    cuda: str | None
    interpreters: dict = field(default_factory=dict)
    gate_index: dict = field(default_factory=dict)  # (file, line, col) -> Gate
    timings: dict = field(default_factory=dict)

    def interpreter(self, sm: int, env: dict | None = None) -> Interpreter:
        key = (sm, tuple(sorted((env or {}).items())))
        interp = self.interpreters.get(key)
        if interp is None:
            interp = Interpreter(self.project, sm, env, self.cuda)
            self.interpreters[key] = interp
        return interp

    def evaluate(self, node: ast.AST, site: "Site", sm: int, env: dict | None = None) -> tuple[Any, Effects]:
        return self.interpreter(sm, env).evaluate(node, site.module, site.chain, site.cls)

    def verdicts(self, node: ast.AST, site: "Site", env: dict | None = None) -> tuple[dict, dict, Effects]:
        """Verdict and value of `node` on every SM, and the merged effects. A test that never reads
        the capability is evaluated once."""
        first = self.sms[0]
        value, effects = self.evaluate(node, site, first, env)
        values = {first: value}
        if effects.touched_arch or uncertainty(value)[1]:
            for sm in self.sms[1:]:
                v, fx = self.evaluate(node, site, sm, env)
                values[sm] = v
                effects.merge(fx)
        else:
            for sm in self.sms[1:]:
                values[sm] = value
        return {sm: verdict(v) for sm, v in values.items()}, values, effects


@dataclass
class Site:
    module: str
    chain: tuple = ()
    cls: ClassRef | None = None
    qualname: str | None = None


# ----------------------------------------------------------------- branch summaries


def _terminates(stmts: list) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def branch_path(stmts: list, module_file, imports_map: dict, top_names: frozenset = frozenset()) -> BranchPath:
    """What a list of statements leads to: imports, calls of named functions, assignments."""
    if not stmts:
        return BranchPath("empty", [], "")
    imported: list = []
    called: list = []
    assigned: list = []
    first_return = None
    first_raise = None
    local_imports: dict = {}
    for stmt in stmts:
        for sub in _walk_no_defs(stmt):
            if isinstance(sub, ast.ImportFrom):
                base = resolve_from(module_file, sub)
                for alias in sub.names:
                    if alias.name != "*":
                        imported.append(f"{base}.{alias.name}")
                        local_imports[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(sub, ast.Import):
                for alias in sub.names:
                    imported.append(alias.name)
                    local_imports[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(sub, ast.Call):
                name = _callee_name(sub.func)
                if name:
                    called.append(name)
            elif isinstance(sub, ast.Return) and first_return is None:
                first_return = sub
            elif isinstance(sub, ast.Raise) and first_raise is None:
                first_raise = sub
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in target_names(target):
                    assigned.append(name)
    # Calls of names the branch imports or the module imports/defines are the interesting ones.
    def known(name):
        head = name.split(".")[0]
        return head in local_imports or head in imports_map or head in top_names or head == "self" or head[:1].isupper()

    interesting_calls = [c for c in dict.fromkeys(called) if known(c)]
    names = list(dict.fromkeys(imported + interesting_calls + assigned))[:MAX_NAMES]
    if imported:
        kind = "import"
    elif interesting_calls:
        kind = "call"
    elif assigned:
        kind = "assign"
    elif first_return is not None:
        kind = "return"
    elif first_raise is not None:
        kind = "raise"
    else:
        kind = "continue"
    head = stmts[0]
    if first_raise is not None and kind == "raise" or isinstance(head, ast.Raise):
        summary = text(first_raise or head)
    elif first_return is not None and kind in ("return",):
        summary = text(first_return)
    else:
        summary = "; ".join(text(s) for s in stmts[:2])
    return BranchPath(kind, names, summary)


# Statements an early exit may do before it leaves: log, warn, print (an expression statement
# calling these), `pass`, or a docstring-like constant.
EXIT_PREAMBLE_CALLS = ("logger.", "logging.", "log.", "warnings.warn", "print", "_logger.", "LOGGER.")


def is_early_exit(stmts: list) -> bool:
    """Whether a branch does nothing but leave: it ends in `raise`, `continue`, `break`, a bare
    `return`, `return None` or `return False`, after at most logging/warning statements. Such a
    branch guards the rest of the function: the SMs that take it are shut out of what follows."""
    if not stmts:
        return False
    *preamble, last = stmts
    for stmt in preamble:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = _callee_name(stmt.value.func) or ""
            if name.startswith(EXIT_PREAMBLE_CALLS) or name in ("print", "warn"):
                continue
        return False
    if isinstance(last, (ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(last, ast.Return):
        value = last.value
        return value is None or (isinstance(value, ast.Constant) and (value.value is None or value.value is False))
    return False


def _walk_no_defs(node: ast.AST):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _callee_name(func: ast.AST) -> str | None:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
        return ".".join(reversed(parts))
    if isinstance(func, ast.Call) and parts:
        inner = _callee_name(func.func)
        return f"{inner}().{'.'.join(reversed(parts))}" if inner else None
    return None


def _atoms(test: ast.AST) -> list:
    if isinstance(test, ast.BoolOp):
        return [a for v in test.values for a in _atoms(v)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _atoms(test.operand)
    if isinstance(test, ast.Compare):
        return [a for v in [test.left, *test.comparators] for a in _atoms(v)]
    if isinstance(test, ast.Constant):
        return []
    return [test]


def _atom_kind(atom: ast.AST) -> str:
    if isinstance(atom, ast.Call):
        return "call"
    if isinstance(atom, ast.Attribute):
        return "attr"
    if isinstance(atom, ast.Name):
        return "const"
    if isinstance(atom, ast.Subscript):
        return _atom_kind(atom.value)
    return "call" if any(isinstance(s, ast.Call) for s in ast.walk(atom)) else "const"


# ----------------------------------------------------------------- the walk


@dataclass
class _Pending:
    gate: Gate
    arch: bool
    env_names: list
    encloses_arch: bool = False
    context: Any = None  # (site, test, verdicts) until the file's walk ends


class _Walker:
    """Walks one candidate module, recording gates, constants, probes and environment writes."""

    def __init__(self, state: ScanState, summary: FileSummary, collected: "_Collected"):
        self.state = state
        self.project = state.project
        self.summary = summary
        self.module = summary.module
        self.file = self.project.files[self.module]
        self.rel = self.file.rel
        self.collected = collected
        self.arch_count = 0
        self._hot: dict = {}

    def run(self) -> None:
        tree = self.project.tree(self.module)
        if tree is None:
            return
        # Lines holding conditional expressions (from the pre-pass): other statements are not walked.
        self.ifexp_lines = self.summary.ifexp_lines
        start = len(self.collected.pending)
        self.block(tree.body, Site(self.module), [])
        # Environment effects only for the gates this file keeps (all keep rules are file-local).
        for pending in self.collected.pending[start:]:
            if pending.env_names and _keep_env_gate(pending, self.rel):
                site, test, verdicts = pending.context
                read = {u.name: u for u in pending.gate.env}
                for name in pending.env_names:
                    read[name].passes_with = self.env_effects(test, site, name, read[name], verdicts, pending.arch)
            pending.context = None

    # statements

    def block(self, stmts: list, site: Site, under: list) -> None:
        under = list(under)
        for index, stmt in enumerate(stmts):
            before = len(self.collected.pending)
            self.statement(stmt, stmts, index, site, under)
            # `if gate: return ...` puts the rest of the block on the gate's false side.
            if isinstance(stmt, ast.If) and _terminates(stmt.body) and not stmt.orelse:
                gate = next((p for p in self.collected.pending[before:] if p.gate.line == stmt.test.lineno and p.gate.statement == "if"), None)
                if gate is not None:
                    under.append((gate, False))

    def statement(self, stmt, stmts, index, site: Site, under: list) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qual = f"{site.qualname}.{stmt.name}" if site.qualname else stmt.name
            inner = Site(self.module, site.chain + (stmt,), site.cls, qual)
            self.block(stmt.body, inner, under)
            return
        if isinstance(stmt, ast.ClassDef):
            qual = f"{site.qualname}.{stmt.name}" if site.qualname else stmt.name
            cls = ClassRef(self.module, qual, stmt, id(stmt))
            self.block(stmt.body, Site(self.module, site.chain, cls, qual), under)
            return
        if isinstance(stmt, ast.If):
            gate = self.test(stmt.test, "if", site, under, stmt, stmts, index)
            body_under = under + [(gate, True)] if gate else under
            else_under = under + [(gate, False)] if gate else under
            before = self.arch_count
            self.block(stmt.body, site, body_under)
            self.block(stmt.orelse, site, else_under)
            if gate is not None and self.arch_count > before:
                gate.encloses_arch = True
            return
        if isinstance(stmt, ast.While):
            gate = self.test(stmt.test, "while", site, under, stmt, stmts, index)
            self.block(stmt.body, site, under + [(gate, True)] if gate else under)
            self.block(stmt.orelse, site, under)
            return
        if isinstance(stmt, ast.Assert):
            self.test(stmt.test, "assert", site, under, stmt, stmts, index)
            return
        if isinstance(stmt, ast.Try):
            self.probe(stmt, site, under)
            self.block(stmt.body, site, under)
            for handler in stmt.handlers:
                self.block(handler.body, site, under)
            self.block(stmt.orelse, site, under)
            self.block(stmt.finalbody, site, under)
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            self.expressions(stmt, site, under, skip_bodies=True)
            self.block(stmt.body, site, under)
            self.block(getattr(stmt, "orelse", []), site, under)
            return
        if isinstance(stmt, ast.Match):
            for case in stmt.cases:
                self.block(case.body, site, under)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            self.assignment(stmt, site, under)
        if isinstance(stmt, (ast.Expr, ast.Assign)):
            self.env_write(stmt, site, under)
        self.expressions(stmt, site, under)

    def expressions(self, stmt, site: Site, under: list, skip_bodies: bool = False) -> None:
        """Conditional expressions inside a statement's expressions."""
        last = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
        if skip_bodies:
            last = stmt.body[0].lineno - 1 if stmt.body else last
        if not any(line in self.ifexp_lines for line in range(stmt.lineno, last + 1)):
            return
        roots = []
        for name, value in ast.iter_fields(stmt):
            if skip_bodies and name in ("body", "orelse"):
                continue
            if isinstance(value, ast.AST):
                roots.append(value)
            elif isinstance(value, list):
                roots.extend(v for v in value if isinstance(v, ast.AST) and not isinstance(v, ast.stmt))
        for root in roots:
            for sub in _walk_no_defs(root):
                if isinstance(sub, ast.IfExp):
                    self.test(sub.test, "ifexp", site, under, sub, None, None)

    # gates

    def relevant(self, node: ast.AST, site: Site) -> tuple[bool, bool]:
        names, attrs = mentions(node)
        arch, env = self.project.relevance.classify(self.summary, names, attrs)
        if arch and env:
            return arch, env
        # A local alias (`flag = is_sm100_supported()` earlier in the function) carries its value's relevance.
        for fn in site.chain:
            hot_arch, hot_env = self.hot_locals(fn)
            arch = arch or bool(names & hot_arch)
            env = env or bool(names & hot_env)
        return arch, env

    def hot_locals(self, fn: ast.AST) -> tuple[set, set]:
        """Locals of `fn` bound to something relevant (architecture, environment)."""
        cached = self._hot.get(id(fn))
        if cached is not None:
            return cached
        scope = self.project.function_scope(fn)
        hot_arch: set = set()
        hot_env: set = set()
        for name, bindings in scope.locals.items():
            for binding in bindings:
                value = getattr(binding, "value", None)
                if isinstance(value, ast.AST) and not isinstance(binding, (ast.Import, ast.ImportFrom)):
                    a, e = self.project.relevance.classify(self.summary, *mentions(value))
                    if a:
                        hot_arch.add(name)
                    if e:
                        hot_env.add(name)
        self._hot[id(fn)] = (hot_arch, hot_env)
        return hot_arch, hot_env

    def test(self, test: ast.AST, statement: str, site: Site, under: list, node, stmts, index) -> "_Pending | None":
        arch_hit, env_hit = self.relevant(test, site)
        if not (arch_hit or env_hit):
            return None
        state = self.state
        verdicts, values, effects = state.verdicts(test, site)
        distinct = set(verdicts.values())
        # A test that reads the capability is a gate even when its answer is the same everywhere
        # (a path no SM can take under the assumed CUDA version is still a finding).
        arch = len(distinct) > 1 or "unknown" in distinct or effects.touched_arch
        env_names = sorted(effects.env_reads)
        if not arch and not env_names:
            return None
        kinds = []
        if arch:
            for atom in _atoms(test):
                _, fx = state.evaluate(atom, site, state.sms[0])
                atom_arch = fx.touched_arch
                if not atom_arch:
                    v, _ = state.evaluate(atom, site, state.sms[0])
                    atom_arch = uncertainty(v)[1]
                if atom_arch:
                    kinds.append(_atom_kind(atom))
        if env_names:
            kinds.append("env")
        kinds = list(dict.fromkeys(kinds)) or (["call"] if arch else ["env"])
        kind = "assert" if statement == "assert" and arch else kinds[0]

        when_true, when_false = self.branches(node, statement, stmts, index)
        gate = Gate(
            id=f"{self.rel}:{test.lineno}:{test.col_offset}",
            file=self.rel,
            line=test.lineno,
            kind=kind,
            kinds=kinds,
            test=text(test),
            function=site.qualname,
            statement=statement,
            sms_true=[sm for sm, v in verdicts.items() if v == "true"],
            sms_maybe=[sm for sm, v in verdicts.items() if v == "maybe"],
            sms_unknown=[sm for sm, v in verdicts.items() if v == "unknown"],
            helpers=[],
            env=[],
            conditions=_conditions(values, verdicts, effects),
            when_true=when_true,
            when_false=when_false,
            under=[],
            notes=sorted(effects.notes),
            role=EXITS if statement == "if" and is_early_exit(node.body) else ENABLES,
        )
        gate._helper_keys = _min_depth_helpers(effects)  # resolved into HelperUse after the walk
        gate._all_helper_keys = dict(effects.helpers)
        for name in env_names:
            read = effects.env_reads[name]
            gate.env.append(EnvUse(name, read.default, read.defined_at, {}))
        if "unknown" in distinct:
            # Never silently: every gate the scan could not decide on some SM is listed with why.
            for reason_text, reason in sorted(effects.unresolved.items()):
                self.collected.unresolved.append(Unresolved(f"{self.rel}:{test.lineno}", reason_text, reason))
            if not effects.unresolved:
                labels = sorted({label for sm, v in values.items() if verdicts[sm] == "unknown" for label in uncertainty(v)[0]})
                self.collected.unresolved.append(
                    Unresolved(
                        f"{self.rel}:{test.lineno}",
                        text(test),
                        "undecided on SM " + ",".join(str(sm) for sm, v in verdicts.items() if v == "unknown")
                        + (": depends on " + "; ".join(labels[:4]) if labels else ""),
                    )
                )
        pending = _Pending(gate, arch, env_names)
        pending.context = (site, test, verdicts)
        gate._under = list(under)
        if arch:
            self.arch_count += 1
        self.collected.pending.append(pending)
        return pending

    def env_effects(self, test, site: Site, name: str, read, verdicts: dict, arch: bool) -> dict:
        """For candidate values of an environment variable: the SMs on which the test is true."""
        default = read.default
        candidates = set(ENV_TRY_VALUES) if not isinstance(default, str) or default.lower() in (
            "0", "1", "true", "false", "") else set()
        # The string values the test compares against (`_backend == "triton"`, `x in ("a", "b")`).
        for sub in ast.walk(test):
            if isinstance(sub, ast.Compare):
                for comparator in [sub.left, *sub.comparators]:
                    elts = comparator.elts if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) else [comparator]
                    for elt in elts:
                        if isinstance(elt, ast.Constant) and isinstance(elt.value, str) and 0 < len(elt.value) <= 64:
                            candidates.add(elt.value)
        out = {}
        for value in sorted(candidates):
            if isinstance(read.default, str) and value == read.default:
                continue
            # Re-evaluated in full: another value can lead the test into code that reads the SM.
            v, _, _ = self.state.verdicts(test, site, {name: value})
            out[value] = sorted(sm for sm, x in v.items() if x in ("true", "maybe"))
        default_sms = sorted(sm for sm, x in verdicts.items() if x in ("true", "maybe"))
        out["<default>"] = default_sms
        return out

    def branches(self, node, statement: str, stmts, index) -> tuple[BranchPath, BranchPath]:
        imports = self.summary.imports
        if statement == "ifexp":
            return (
                BranchPath("value", [], text(node.body)),
                BranchPath("value", [], text(node.orelse)),
            )
        if statement == "assert":
            message = text(node.msg) if node.msg is not None else "AssertionError"
            return BranchPath("continue", [], "continues"), BranchPath("raise", [], f"raise AssertionError({message})")
        when_true = branch_path(node.body, self.file, imports, self.summary.top_names)
        orelse = node.orelse
        if not orelse and _terminates(node.body) and stmts is not None:
            # `if gate: return fast()` falls through to the alternative below it.
            following = []
            for stmt in stmts[index + 1 :]:
                following.append(stmt)
                if isinstance(stmt, (ast.Return, ast.Raise)):
                    break
                if len(following) >= 10:
                    break
            when_false = branch_path(following, self.file, imports, self.summary.top_names)
            if when_false.kind != "empty":
                when_false = BranchPath(when_false.kind, when_false.names, "falls through: " + when_false.text)
        else:
            when_false = branch_path(orelse, self.file, imports, self.summary.top_names)
        return when_true, when_false

    # other records

    def assignment(self, stmt, site: Site, under: list) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = [n for t in targets for n in target_names(t)]
        if site.chain:
            names = [n for n in names if n.startswith("self.")]
        elif site.cls is not None:
            return
        if not names:
            return
        relevance = self.project.relevance
        if site.chain:
            if not any(n[5:] in relevance.arch_attrs for n in names):
                return
        elif not any(f"{self.module}.{n}" in relevance.arch_qualified or f"{self.module}.{n}" in relevance.env_qualified for n in names):
            return
        arch_hit, env_hit = self.relevant(stmt.value, site)
        if not (arch_hit or env_hit):
            return
        verdicts, values, effects = self.state.verdicts(stmt.value, site)
        distinct = set(verdicts.values())
        arch = len(distinct) > 1 or "unknown" in distinct or effects.touched_arch
        env_names = sorted(effects.env_reads)
        if not arch and not any(looks_arch(n) for n in env_names + names):
            return
        if not arch and not env_names:
            return
        owner = f"{site.cls.qualname}." if site.cls is not None and site.chain else ""
        for name in names:
            label = owner + (name[5:] if name.startswith("self.") else name)
            self.collected.constants.append(
                Constant(
                    name=label,
                    defined_at=f"{self.rel}:{stmt.lineno}",
                    sms=sorted(sm for sm, v in verdicts.items() if v in ("true", "maybe")),
                    sms_definite=sorted(sm for sm, v in verdicts.items() if v == "true"),
                    env=env_names,
                    conditions=_conditions(values, verdicts, effects),
                )
            )
            self.collected.constant_keys[f"{self.rel}:{stmt.lineno}"] = effects

    def probe(self, stmt: ast.Try, site: Site, under: list) -> None:
        from .index import probe_modules

        modules = probe_modules(stmt)
        if not modules:
            return
        probe = ImportProbe(
            id=f"{self.rel}:{stmt.lineno}:{stmt.col_offset}",
            file=self.rel,
            line=stmt.lineno,
            modules=list(modules),
            function=site.qualname,
            under=[],
        )
        probe._under = list(under)
        self.collected.probes[probe.id] = probe

    def env_write(self, stmt, site: Site, under: list) -> None:
        """os.environ[NAME] = v, os.environ.setdefault(NAME, v), os.putenv, envs.NAME.set(v)."""
        writes = []
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Subscript) and text(target.value) in ("os.environ", "environ"):
                    writes.append((target.slice, stmt.value))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            func = call.func
            if isinstance(func, ast.Attribute):
                base = text(func.value)
                if func.attr in ("setdefault",) and base in ("os.environ", "environ") and len(call.args) == 2:
                    writes.append((call.args[0], call.args[1]))
                elif func.attr == "putenv" and len(call.args) == 2:
                    writes.append((call.args[0], call.args[1]))
                elif func.attr in ("set", "override") and len(call.args) == 1:
                    writes.append((func.value, call.args[0]))
        for name_node, value_node in writes:
            name, _ = self.state.evaluate(name_node, site, self.state.sms[0])
            from .values import EnvField

            if isinstance(name, EnvField):
                name = name.name
            if not isinstance(name, str):
                continue
            self.collected.env_writes.append(
                {"name": name, "at": f"{self.rel}:{stmt.lineno}", "value": text(value_node), "_under": list(under)}
            )


def _min_depth_helpers(effects: Effects) -> dict:
    if not effects.helpers:
        return {}
    least = min(depth for _, depth, _ in effects.helpers.values())
    return {where: (name, module) for where, (name, depth, module) in effects.helpers.items() if depth == least}


def _conditions(values: dict, verdicts: dict, effects: Effects) -> list:
    labels: set = set()
    for sm, value in values.items():
        if verdicts[sm] in ("maybe", "unknown"):
            labels |= set(uncertainty(value)[0])
    out = sorted(labels)
    if len(out) > MAX_CONDITIONS:
        out = out[:MAX_CONDITIONS] + [f"... {len(out) - MAX_CONDITIONS} more"]
    return out


@dataclass
class _Collected:
    pending: list = field(default_factory=list)
    constants: list = field(default_factory=list)
    constant_keys: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    env_writes: list = field(default_factory=list)
    unresolved: list = field(default_factory=list)

    def merge(self, other: "_Collected") -> None:
        self.pending.extend(other.pending)
        self.constants.extend(other.constants)
        self.constant_keys.update(other.constant_keys)
        self.probes.update(other.probes)
        self.env_writes.extend(other.env_writes)
        self.unresolved.extend(other.unresolved)


# The walk is handed to forked workers through this slot (set only while a pool is alive): a
# forked child shares the parent's parsed tree and pre-pass for free, where pickling them would
# cost more than the walk.
_FORK_JOB: tuple | None = None


def _walk_chunk(index: int) -> _Collected:
    state, chunks = _FORK_JOB
    collected = _Collected()
    for summary in chunks[index]:
        _Walker(state, summary, collected).run()
    return collected


def _walk_all(state: ScanState, candidates: list, workers: int | None) -> list:
    """Walk the candidate files, split over forked workers when there are many."""
    global _FORK_JOB
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    if workers <= 1 or len(candidates) < 64 or "fork" not in multiprocessing.get_all_start_methods():
        collected = _Collected()
        for summary in candidates:
            _Walker(state, summary, collected).run()
        return [collected]
    # Balance by file size, largest first, dealt round-robin.
    ordered = sorted(candidates, key=lambda s: -state.project.files[s.module].path.stat().st_size)
    chunks = [ordered[i :: workers * 4] for i in range(workers * 4)]
    _FORK_JOB = (state, chunks)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(_walk_chunk, range(len(chunks)), chunksize=1)
    finally:
        _FORK_JOB = None


# ----------------------------------------------------------------- scan


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


def scan(
    source_root: Path,
    *,
    sms: tuple = SM_VERSIONS,
    cuda: str | None = None,
    include_tests: bool = False,
    workers: int | None = None,
) -> GateScan:
    """Statically scan the engine source tree at `source_root` for capability gates.

    Nothing in the tree is imported. Every gate is evaluated for each compute capability in `sms`
    (major*10+minor) under the interpreter's stated assumptions (CUDA platform; environment at
    its defaults; `cuda` as torch.version.cuda, default newer than any check). What the scan cannot
    resolve is listed in `unresolved` with file:line and the reason. The returned scan keeps its
    live state (`scan.state`) for `evaluate(..., env=...)` and `fallbacks_for_kernels`.
    """
    source_root = Path(source_root).resolve()
    if not source_root.is_dir():
        raise FileNotFoundError(f"{source_root} is not a directory")
    sms = tuple(sorted(set(int(s) for s in sms)))
    timings: dict = {}
    with _no_gc():
        t0 = time.perf_counter()
        files = discover(source_root, include_tests=include_tests)
        summaries = summarize_all(files, workers=workers)
        timings["prepass_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        rel = relevance(summaries)
        project = build_project(source_root, files, summaries, rel)
        state = ScanState(project, sms, cuda, timings=timings)
        collected = _Collected()
        candidates = []
        for summary in summaries:
            if summary.error is not None:
                collected.unresolved.append(Unresolved(summary.rel, "", f"file not parsed: {summary.error}"))
                continue
            if any(rel.classify(summary, summary.names, summary.attrs)):
                candidates.append(summary)
        interpreted = len(candidates)
        for part in _walk_all(state, candidates, workers):
            collected.merge(part)
        timings["interpret_s"] = time.perf_counter() - t1
        result = _assemble(state, summaries, collected, source_root, interpreted, len(files))
        timings["total_s"] = time.perf_counter() - t0
    return result


def _keep_env_gate(p: _Pending, rel_path: str) -> bool:
    if p.arch or p.encloses_arch:
        return True
    if any(looks_arch(n) for n in p.env_names) or looks_arch(rel_path):
        return True
    return any(parent is not None and parent.arch for parent, _ in p.gate._under)


def _assemble(state: ScanState, summaries, collected: _Collected, root: Path, interpreted: int, scanned: int) -> GateScan:
    kept = [p for p in collected.pending if _keep_env_gate(p, p.gate.file)]
    kept_ids = {id(p) for p in kept}
    for p in kept:
        p.gate.under = [{"gate": parent.gate.id, "branch": branch} for parent, branch in p.gate._under if id(parent) in kept_ids]

    # Helpers: every architecture-dependent callable the kept gates reached, evaluated on its own.
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

    # Import probes: walked ones know their enclosing gates; the rest come from the pre-pass.
    probes = dict(collected.probes)
    for summary in summaries:
        for info in summary.probes:
            pid = f"{summary.rel}:{info.line}:{info.col}"
            if pid not in probes:
                probes[pid] = ImportProbe(pid, summary.rel, info.line, list(info.modules), info.function, [])
    for probe in probes.values():
        under = probe.__dict__.pop("_under", [])
        probe.under = [{"gate": parent.gate.id, "branch": branch} for parent, branch in under if id(parent) in kept_ids]

    # Environment switches read by the gates and constants, with writes under architecture gates.
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

    unresolved: dict = {}
    for u in sorted(collected.unresolved, key=lambda u: (u.at, u.text, u.reason)):
        unresolved.setdefault((u.at, u.text), u)
    for where, helper in helpers.items():
        if not helper.sms and helper.conditions and any("unresolved" in c for c in helper.conditions):
            unresolved.setdefault((where, helper.name), Unresolved(where, helper.name, "helper could not be evaluated"))
    for module, error in sorted(state.project.parse_errors.items()):
        file = state.project.files[module]
        unresolved.setdefault((file.rel, ""), Unresolved(file.rel, "", f"file not parsed: {error}"))

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
        import_probes=sorted(probes.values(), key=lambda p: (p.file, p.line, p.id)),
        env=sorted(switches.values(), key=lambda s: s.name),
        unresolved=sorted(unresolved.values(), key=lambda u: (u.at, u.text, u.reason)),
        state=state,
    )


def _evaluate_helper(state: ScanState, name: str, module: str, where: str) -> Helper | None:
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
        conditions=_conditions(values, verdicts, effects),
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
