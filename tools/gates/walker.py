"""The walk of one candidate module: every `if`/`while`/`assert`/conditional expression whose test
mentions something architecture- or environment-relevant is evaluated on every SM; those that
depend on the SM (or read an environment variable on an architecture path) are recorded as pending
gates, with the constants, import probes and environment writes met on the way. `walk_all` walks
the candidates, split over forked workers when there are many."""

from __future__ import annotations

import ast
import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from tools.pyeval.syntax import assign_targets, walk_no_defs

from .branches import atom_kind, atoms, branch_path, is_early_exit, terminates
from .effects import Effects
from .index import looks_arch, mentions, probe_modules, target_names
from .labels import text
from .model import ENABLES, EXITS, BranchPath, Constant, EnvUse, Gate, ImportProbe, Unresolved
from .prepass import FileSummary
from .values import ClassRef, EnvField, uncertainty
from .verdicts import ScanState, Site

MAX_CONDITIONS = 12
ENV_TRY_VALUES = ("1", "0")


@dataclass
class Pending:
    gate: Gate
    arch: bool
    env_names: list
    encloses_arch: bool = False
    context: Any = None  # (site, test, verdicts) until the file's walk ends


class _Walker:
    """Walks one candidate module, recording gates, constants, probes and environment writes."""

    def __init__(self, state: ScanState, summary: FileSummary, collected: "Collected"):
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
            if pending.env_names and keep_env_gate(pending, self.rel):
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
            if isinstance(stmt, ast.If) and terminates(stmt.body) and not stmt.orelse:
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
            for sub in walk_no_defs(root):
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

    def test(self, test: ast.AST, statement: str, site: Site, under: list, node, stmts, index) -> "Pending | None":
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
            for atom in atoms(test):
                _, fx = state.evaluate(atom, site, state.sms[0])
                atom_arch = fx.touched_arch
                if not atom_arch:
                    v, _ = state.evaluate(atom, site, state.sms[0])
                    atom_arch = uncertainty(v)[1]
                if atom_arch:
                    kinds.append(atom_kind(atom))
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
            conditions=conditions(values, verdicts, effects),
            when_true=when_true,
            when_false=when_false,
            under=[],
            notes=sorted(effects.notes),
            role=EXITS if statement == "if" and is_early_exit(node.body) else ENABLES,
        )
        gate._helper_keys = min_depth_helpers(effects)  # resolved into HelperUse after the walk
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
        pending = Pending(gate, arch, env_names)
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
        if not orelse and terminates(node.body) and stmts is not None:
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
        names = [n for t in assign_targets(stmt) for n in target_names(t)]
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
                    conditions=conditions(values, verdicts, effects),
                )
            )
            self.collected.constant_keys[f"{self.rel}:{stmt.lineno}"] = effects

    def probe(self, stmt: ast.Try, site: Site, under: list) -> None:
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
            if isinstance(name, EnvField):
                name = name.name
            if not isinstance(name, str):
                continue
            self.collected.env_writes.append(
                {"name": name, "at": f"{self.rel}:{stmt.lineno}", "value": text(value_node), "_under": list(under)}
            )


def min_depth_helpers(effects: Effects) -> dict:
    if not effects.helpers:
        return {}
    least = min(depth for _, depth, _ in effects.helpers.values())
    return {where: (name, module) for where, (name, depth, module) in effects.helpers.items() if depth == least}


def conditions(values: dict, verdicts: dict, effects: Effects) -> list:
    labels: set = set()
    for sm, value in values.items():
        if verdicts[sm] in ("maybe", "unknown"):
            labels |= set(uncertainty(value)[0])
    out = sorted(labels)
    if len(out) > MAX_CONDITIONS:
        out = out[:MAX_CONDITIONS] + [f"... {len(out) - MAX_CONDITIONS} more"]
    return out


@dataclass
class Collected:
    pending: list = field(default_factory=list)
    constants: list = field(default_factory=list)
    constant_keys: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    env_writes: list = field(default_factory=list)
    unresolved: list = field(default_factory=list)

    def merge(self, other: "Collected") -> None:
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


def _walk_chunk(index: int) -> Collected:
    state, chunks = _FORK_JOB
    collected = Collected()
    for summary in chunks[index]:
        _Walker(state, summary, collected).run()
    return collected


def walk_all(state: ScanState, candidates: list, workers: int | None,
             progress: Callable[[int, int], None] | None = None) -> list:
    """Walk the candidate files, split over forked workers when there are many; ``progress(done,
    total)`` as files are walked (after each chunk when split)."""
    global _FORK_JOB
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    if workers <= 1 or len(candidates) < 64 or "fork" not in multiprocessing.get_all_start_methods():
        collected = Collected()
        for done, summary in enumerate(candidates, start=1):
            _Walker(state, summary, collected).run()
            if progress:
                progress(done, len(candidates))
        return [collected]
    # Balance by file size, largest first, dealt round-robin.
    ordered = sorted(candidates, key=lambda s: -state.project.files[s.module].path.stat().st_size)
    chunks = [ordered[i :: workers * 4] for i in range(workers * 4)]
    _FORK_JOB = (state, chunks)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts, done = [], 0
            # imap keeps map's order, so the merge (and the scan) is the same as before progress was told
            for index, part in enumerate(pool.imap(_walk_chunk, range(len(chunks)), chunksize=1)):
                parts.append(part)
                done += len(chunks[index])
                if progress:
                    progress(done, len(candidates))
            return parts
    finally:
        _FORK_JOB = None



def keep_env_gate(p: Pending, rel_path: str) -> bool:
    """Whether a gate found by the walk is reported: every architecture gate, and an environment
    gate that encloses, sits under or names something architecture-specific."""
    if p.arch or p.encloses_arch:
        return True
    if any(looks_arch(n) for n in p.env_names) or looks_arch(rel_path):
        return True
    return any(parent is not None and parent.arch for parent, _ in p.gate._under)
