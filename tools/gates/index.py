"""The scanned tree as Python modules: discovery, parsing (cached), top-level symbols, and the
syntactic pre-pass that decides which files and tests are worth interpreting.

Nothing in the tree is imported; files are read and parsed with `ast`.
"""

from __future__ import annotations

import ast
import functools
import gc
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# Calls that read the device's compute capability: everything else the scan learns about an
# architecture is derived from these by reading the tree's own definitions. Device properties count
# only when their major/minor is read.
CAPABILITY_TOKENS = frozenset({"get_device_capability", "nvmlDeviceGetCudaComputeCapability", "get_device_properties.major"})
# An attribute name used in more files than this is too common to carry relevance by name alone.
COMMON_ATTR_FILES = 60
ENV_PRIMITIVES = frozenset({"getenv", "environ", "putenv"})

# A name that looks like it is about a GPU architecture; used only to pick tests to interpret and to
# decide whether something the scan could not resolve is reported as unresolved (never an answer).
ARCH_NAME = re.compile(
    r"(?i)(?:^|_|\b)(?:sm_?\d{2,3}[a-z]?|sm\d+x|sm1\d\dx?|hopper|blackwell|ampere|ada_?lovelace|volta|turing"
    r"|capabilit|compute_cap|device_sm|cuda_arch)"
)

HELPER_MAX_LINES = 40
TEST_DIR_NAMES = frozenset({"test", "tests", "testing", "unit_tests"})


@functools.lru_cache(maxsize=65536)
def looks_arch(text: str) -> bool:
    return bool(ARCH_NAME.search(text))


@dataclass
class ModuleFile:
    name: str  # dotted module name
    path: Path
    rel: str  # path relative to the source root, as reported
    is_package: bool


@dataclass
class DefInfo:
    qualname: str
    name: str
    line: int
    small: bool  # helper-sized: few statements
    returns_value: bool
    names: frozenset  # Name ids it mentions
    attrs: frozenset  # attribute names it mentions
    is_method: bool


@dataclass
class AssignInfo:
    targets: tuple  # names; "self.X" for instance attributes
    names: frozenset
    attrs: frozenset
    line: int
    scope: str  # "module", "class", "method"
    call_name: str | None  # name of the called function/class when the value is a call


@dataclass
class ClassInfo:
    name: str
    line: int
    bases: tuple
    methods: dict  # name -> names and attrs it mentions
    fields: list  # (name, call_name, line)


@dataclass
class ProbeInfo:
    line: int
    col: int
    modules: tuple
    function: str | None


@dataclass
class FileSummary:
    module: str
    rel: str
    names: frozenset = frozenset()
    attrs: frozenset = frozenset()
    defs: list = field(default_factory=list)
    assigns: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    dicts: list = field(default_factory=list)  # (name, ((key, value-string), ...))
    probes: list = field(default_factory=list)
    imports: dict = field(default_factory=dict)  # local name -> module or module.name
    star_imports: list = field(default_factory=list)
    top_names: frozenset = frozenset()  # names bound at module level
    all_names: tuple | None = None  # __all__ when it is a literal
    is_package: bool = False
    ifexp_lines: frozenset = frozenset()
    error: str | None = None


def discover(root: Path, include_tests: bool = False) -> list[ModuleFile]:
    """Every .py file under `root` as a module. When `root` is a package (has __init__.py), module
    names start with its directory name, as an `import` would see them. Test directories and test
    files are left out unless `include_tests`."""
    root = root.resolve()
    prefix = [root.name] if (root / "__init__.py").is_file() else []
    found: list[ModuleFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d != "__pycache__" and (include_tests or d not in TEST_DIR_NAMES)
        )
        rel_dir = Path(dirpath).relative_to(root)
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            if not include_tests and (
                filename.startswith("test_") or filename.endswith("_test.py") or filename == "conftest.py"
            ):
                continue
            rel = (rel_dir / filename).as_posix()
            parts = prefix + list(rel_dir.parts)
            is_package = filename == "__init__.py"
            if not is_package:
                parts.append(filename[:-3])
            name = ".".join(parts) if parts else "__init__"
            found.append(ModuleFile(name, Path(dirpath) / filename, rel, is_package))
    return found


def parse_file(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in target_names(elt)]
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"):
        return [f"self.{target.attr}"]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def mentions(node: ast.AST, ifexp_lines: set | None = None) -> tuple[set, set]:
    """Bare names (and `name.attr` pairs, for module attributes) and attribute names in `node`;
    lines of conditional expressions are added to `ifexp_lines` when given."""
    names: set = set()
    attrs: set = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.IfExp) and ifexp_lines is not None:
            ifexp_lines.add(sub.lineno)
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            attrs.add(sub.attr)
            if isinstance(sub.value, ast.Name):
                names.add(f"{sub.value.id}.{sub.attr}")
            elif sub.attr in ("major", "minor") and call_name(sub.value) == "get_device_properties":
                attrs.add("get_device_properties.major")
    return names, attrs


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by `from <level dots><target> import ...` inside `module`."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    if target:
        return f"{base}.{target}" if base else target
    return base


def is_property(node: ast.AST) -> bool:
    for deco in getattr(node, "decorator_list", ()):
        name = deco.attr if isinstance(deco, ast.Attribute) else deco.id if isinstance(deco, ast.Name) else None
        if name in ("property", "cached_property"):
            return True
    return False


PROBE_EXCEPTIONS = frozenset(
    {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError", "RuntimeError", "AttributeError"}
)


def probe_modules(node: ast.Try) -> tuple:
    """Modules imported in a try body whose handlers catch an import failure; () if not a probe."""
    catches = False
    for handler in node.handlers:
        if handler.type is None:
            catches = True
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for t in types:
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            if name in PROBE_EXCEPTIONS:
                catches = True
    if not catches:
        return ()
    modules: list = []

    def collect(stmts):
        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                modules.extend(alias.name for alias in stmt.names)
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                modules.append(stmt.module)
            elif isinstance(stmt, (ast.If, ast.With)):
                collect(stmt.body)
                collect(getattr(stmt, "orelse", []))

    collect(node.body)
    return tuple(dict.fromkeys(modules))


class _Summarizer:
    """One recursive pass over a module collecting what the pre-pass needs."""

    def __init__(self, summary: FileSummary):
        self.summary = summary
        self.names: set = set()
        self.attrs: set = set()
        self.collectors: list = []  # (names, attrs) of enclosing helper-sized functions
        self.top: set = set()
        self.ifexp_lines: set = set()

    def run(self, tree: ast.Module) -> None:
        self.block(tree.body, scope="module", function=None, class_name=None)
        for stmt in tree.body:
            for sub in ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) else [stmt]:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.top.add(sub.name)
                elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    for target in targets:
                        self.top.update(n for n in target_names(target) if not n.startswith("self."))
                        if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(sub.value, (ast.List, ast.Tuple)):
                            self.summary.all_names = tuple(
                                e.value for e in sub.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                            )
        self.summary.top_names = frozenset(self.top)
        self.summary.ifexp_lines = frozenset(self.ifexp_lines)
        self.summary.names = frozenset(self.names)
        self.summary.attrs = frozenset(self.attrs)

    def block(self, stmts, scope, function, class_name):
        for stmt in stmts:
            self.statement(stmt, scope, function, class_name)

    def statement(self, stmt, scope, function, class_name):
        summary = self.summary
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(stmt, scope, function, class_name)
            return
        if isinstance(stmt, ast.ClassDef):
            for expr in stmt.bases + stmt.decorator_list + [k.value for k in stmt.keywords]:
                self.expr(expr)
            info = ClassInfo(stmt.name, stmt.lineno, tuple(ast.unparse(b) for b in stmt.bases), {}, [])
            if scope == "module":
                summary.classes.append(info)
            qual = f"{function}.{stmt.name}" if function else stmt.name
            for item in stmt.body:
                if isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for target in targets:
                        for name in target_names(target):
                            info.fields.append((name, call_name(item.value), item.lineno))
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.function(item, "class", qual, stmt.name, info)
                else:
                    self.statement(item, "class", qual, stmt.name)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                self.expr(target)
            if stmt.value is None:
                return
            names, attrs = mentions(stmt.value, self.ifexp_lines)
            self.add(names, attrs)
            flat = tuple(n for t in targets for n in target_names(t))
            if flat and (scope in ("module", "class") or any(n.startswith("self.") for n in flat)):
                kind = scope if scope in ("module", "class") else "method"
                kept = flat if kind != "method" else tuple(n for n in flat if n.startswith("self."))
                summary.assigns.append(
                    AssignInfo(kept, frozenset(names), frozenset(attrs), stmt.lineno, kind, call_name(stmt.value))
                )
            if scope == "module" and isinstance(stmt.value, ast.Dict):
                pairs = tuple(
                    (k.value, v.value)
                    for k, v in zip(stmt.value.keys, stmt.value.values)
                    if isinstance(k, ast.Constant)
                    and isinstance(k.value, str)
                    and isinstance(v, ast.Constant)
                    and isinstance(v.value, str)
                )
                if pairs:
                    for name in flat:
                        summary.dicts.append((name, pairs))
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.imported(stmt, scope)
            return
        if isinstance(stmt, ast.Try):
            modules = probe_modules(stmt)
            if modules:
                summary.probes.append(ProbeInfo(stmt.lineno, stmt.col_offset, modules, function))
        # Any other statement: expressions inside, and nested blocks with the same scope.
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self.block(value, scope, function, class_name)
                else:
                    for item in value:
                        if isinstance(item, ast.excepthandler):
                            if item.type is not None:
                                self.expr(item.type)
                            self.block(item.body, scope, function, class_name)
                        elif isinstance(item, ast.match_case):
                            self.block(item.body, scope, function, class_name)
                        elif isinstance(item, ast.AST):
                            self.expr(item)
            elif isinstance(value, ast.AST):
                self.expr(value)

    def function(self, node, scope, function, class_name, class_info=None):
        for expr in node.decorator_list:
            self.expr(expr)
        qual = f"{function}.{node.name}" if function else node.name
        span = (node.end_lineno or node.lineno) - node.lineno
        small = span <= HELPER_MAX_LINES
        collector = (set(), set()) if small else None
        if collector is not None:
            self.collectors.append(collector)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.expr(default)
        self.block(node.body, "function", qual, class_name)
        returns_value = False
        if collector is not None:
            self.collectors.pop()
            returns_value = any(
                isinstance(sub, ast.Return)
                and sub.value is not None
                and not (isinstance(sub.value, ast.Constant) and sub.value.value is None)
                for sub in ast.walk(node)
            )
        is_method = scope == "class"
        if scope in ("module", "class"):
            self.summary.defs.append(
                DefInfo(
                    qualname=qual,
                    name=node.name,
                    line=node.lineno,
                    small=small,
                    returns_value=returns_value,
                    names=frozenset(collector[0]) if collector else frozenset(),
                    attrs=frozenset(collector[1]) if collector else frozenset(),
                    is_method=is_method,
                )
            )
        if class_info is not None:
            class_info.methods[node.name] = (
                (frozenset(collector[0]) | frozenset(collector[1])) if collector else frozenset()
            )

    def imported(self, stmt, scope):
        summary = self.summary
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    local, target = alias.asname, alias.name
                else:
                    local = target = alias.name.split(".")[0]
                summary.imports.setdefault(local, target)
                if scope == "module":
                    self.top.add(local)
            return
        base = resolve_relative(summary.module, summary.is_package, stmt.level, stmt.module)
        for alias in stmt.names:
            if alias.name == "*":
                if scope == "module":
                    summary.star_imports.append(base)
                continue
            local = alias.asname or alias.name
            summary.imports.setdefault(local, f"{base}.{alias.name}" if base else alias.name)
            if scope == "module":
                self.top.add(local)

    def add(self, names, attrs):
        self.names |= names
        self.attrs |= attrs
        for collector in self.collectors:
            collector[0].update(names)
            collector[1].update(attrs)

    def expr(self, node):
        names, attrs = mentions(node, self.ifexp_lines)
        self.add(names, attrs)


def summarize(module: str, rel: str, path: str, is_package: bool = False) -> FileSummary:
    """The pre-pass facts of one file (runs in a worker process)."""
    summary = FileSummary(module=module, rel=rel, is_package=is_package)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            tree = parse_file(Path(path))
        except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
            summary.error = f"{type(exc).__name__}: {exc}"
            return summary
        _Summarizer(summary).run(tree)
        return summary
    finally:
        if gc_was_enabled:
            gc.enable()


def summarize_all(files: list[ModuleFile], workers: int | None = None) -> list[FileSummary]:
    """Pre-pass over every file, in worker processes when there are many."""
    jobs = [(f.name, f.rel, str(f.path), f.is_package) for f in files]
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    if workers <= 1 or len(jobs) < 200:
        return [summarize(*job) for job in jobs]
    chunk = max(8, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_summarize_job, jobs, chunksize=chunk))


def _summarize_job(job: tuple) -> FileSummary:
    return summarize(*job)


def _public(name: str) -> bool:
    return not (name.startswith("__") and name.endswith("__")) and name != "_"


class Resolver:
    """Module-level name resolution over the pre-pass summaries (imports, re-exports, star imports)."""

    def __init__(self, summaries: list[FileSummary]):
        self.by_module = {s.module: s for s in summaries}

    def canonical(self, qualified: str, depth: int = 0) -> str:
        """Follow re-exports of `module.name` to where the name is defined."""
        module, _, name = qualified.rpartition(".")
        summary = self.by_module.get(module)
        if summary is None or depth > 12:
            return qualified
        if name in summary.top_names:
            target = summary.imports.get(name)
            if target is not None and target != qualified:
                return self.canonical(target, depth + 1)
            return qualified
        for star in summary.star_imports:
            source = self.by_module.get(star)
            if source is not None and (name in source.top_names or source.star_imports):
                found = self.canonical(f"{star}.{name}", depth + 1)
                found_module, _, found_name = found.rpartition(".")
                found_summary = self.by_module.get(found_module)
                if found_summary is not None and found_name in found_summary.top_names:
                    return found
        return qualified

    def ref(self, summary: FileSummary, token: str) -> str | None:
        """The qualified in-tree name a bare name or `name.attr` token in `summary` refers to."""
        if "." in token:
            base, attr = token.split(".", 1)
            target = summary.imports.get(base)
            if target is not None and target in self.by_module:
                return self.canonical(f"{target}.{attr}")
            return None
        target = summary.imports.get(token)
        if target is not None:
            return self.canonical(target)
        if token in summary.top_names:
            return f"{summary.module}.{token}"
        return None


def relevance(summaries: list[FileSummary]) -> "Relevance":
    """Syntactic closure from the capability and environment primitives over the tree's own
    definitions. It only picks what to interpret (over-approximate by design); the interpreter
    decides what actually depends on the architecture or the environment.

    Architecture: helper-sized functions and methods that mention a relevant name, module
    constants computed from one, dispatch tables whose string values name one; instance attributes
    assigned from one are matched in tests but do not propagate further. Environment: registry
    classes whose `get` reads os.environ (their fields and instances), and module-level functions
    and constants computed from the environment. Bare names are resolved through each module's
    imports, so a common name defined somewhere else does not leak in."""
    resolver = Resolver(summaries)
    items = []  # (kind, qualified-or-attr name, resolved refs, attrs, raw names, is_attr_level)
    for s in summaries:
        def resolved(names):
            out = set()
            for token in names:
                q = resolver.ref(s, token)
                if q is not None:
                    out.add(q)
            return frozenset(out)

        for d in s.defs:
            if not (d.small and d.returns_value and _public(d.name)):
                continue
            items.append(("method" if d.is_method else "def", d.name, f"{s.module}.{d.qualname}", resolved(d.names), d.attrs, d.names))
        for a in s.assigns:
            for t in a.targets:
                if a.scope == "method":
                    items.append(("self", t[5:], None, resolved(a.names), a.attrs, a.names))
                elif a.scope == "class":
                    items.append(("field", t, None, resolved(a.names), a.attrs, a.names))
                elif _public(t):
                    items.append(("const", t, f"{s.module}.{t}", resolved(a.names), a.attrs, a.names))
        for name, pairs in s.dicts:
            items.append(("dict", name, f"{s.module}.{name}", frozenset(), frozenset(), frozenset(v for _, v in pairs)))

    attr_files: dict = {}
    for s in summaries:
        for a in s.attrs:
            attr_files[a] = attr_files.get(a, 0) + 1

    def closure(seeds: frozenset, extra_qualified: set, allow: set) -> tuple[set, set]:
        qualified = set(extra_qualified)
        attrs = set(seeds)  # attribute names that carry relevance into other definitions
        terminal = set()  # attribute names matched in tests only (instance attributes, fields)
        bare_values = set()  # plain names of relevant definitions, for dispatch-table values
        grown = True
        while grown:
            grown = False
            for kind, name, qname, refs, item_attrs, raw in items:
                if kind not in allow:
                    continue
                if kind == "dict":
                    if raw & bare_values and qname not in qualified:
                        qualified.add(qname)
                        grown = True
                    continue
                seeded = raw & seeds or item_attrs & seeds
                if not seeded and "get_device_properties" in item_attrs | raw:
                    # device properties carry the capability through .major/.minor
                    seeded = bool(item_attrs & {"major", "minor"}) and "get_device_properties.major" in seeds
                if not (refs & qualified or item_attrs & attrs or seeded):
                    continue
                if kind in ("self", "field"):
                    if attr_files.get(name, 0) <= COMMON_ATTR_FILES:
                        terminal.add(name)
                elif kind == "method":
                    if name not in attrs and attr_files.get(name, 0) <= COMMON_ATTR_FILES:
                        attrs.add(name)
                        grown = True
                if qname is not None and qname not in qualified:
                    qualified.add(qname)
                    bare_values.add(name)
                    grown = True
        return qualified, attrs | terminal

    arch_qualified, arch_attrs = closure(CAPABILITY_TOKENS, set(), {"def", "method", "self", "field", "const", "dict"})
    # Dispatch tables map attribute names to helper names: a key whose helper is relevant is an
    # attribute name that carries the architecture.
    relevant_bare = {q.rpartition(".")[2] for q in arch_qualified}
    for s in summaries:
        for name, pairs in s.dicts:
            if f"{s.module}.{name}" in arch_qualified:
                arch_attrs.update(k for k, v in pairs if v in relevant_bare)

    classes = [c for s in summaries for c in s.classes]
    field_classes = {c.name for c in classes if ENV_PRIMITIVES & c.methods.get("get", frozenset())}
    grown = True
    while grown:
        grown = False
        for c in classes:
            if c.name not in field_classes and any(b.split(".")[-1] in field_classes for b in c.bases):
                field_classes.add(c.name)
                grown = True
    registries = set()
    env_fields = set()
    for c in classes:
        fields = [name for name, call, _ in c.fields if call in field_classes]
        if fields:
            registries.add(c.name)
            env_fields.update(fields)
    registry_instances = {
        f"{s.module}.{t}" for s in summaries for a in s.assigns if a.scope == "module" and a.call_name in registries for t in a.targets
    }
    env_qualified, env_attrs = closure(ENV_PRIMITIVES | frozenset(env_fields), registry_instances, {"def", "const"})
    return Relevance(
        resolver=resolver,
        arch_qualified=frozenset(arch_qualified),
        arch_attrs=frozenset(arch_attrs),
        env_qualified=frozenset(env_qualified),
        env_attrs=frozenset(env_attrs) | frozenset(env_fields),
    )


@dataclass
class Relevance:
    """What can carry an architecture (`arch_*`) or an environment variable (`env_*`) into a test:
    qualified in-tree names, and attribute names (methods, properties, fields, dispatch keys)."""

    resolver: Resolver
    arch_qualified: frozenset
    arch_attrs: frozenset
    env_qualified: frozenset
    env_attrs: frozenset

    def classify(self, summary: FileSummary, names, attrs) -> tuple[bool, bool]:
        """(arch, env): whether an expression mentioning these names and attributes in the module of
        `summary` may depend on the architecture / the environment."""
        refs = {q for q in (self.resolver.ref(summary, t) for t in names) if q is not None}
        arch = bool(refs & self.arch_qualified or attrs & self.arch_attrs)
        if not arch:
            # A name that looks architectural is interpreted even when the pre-pass cannot resolve
            # it, so that an unresolvable one is reported rather than skipped.
            arch = any(looks_arch(t) for t in names) or any(looks_arch(t) for t in attrs)
        env = bool(refs & self.env_qualified or attrs & self.env_attrs or names & ENV_PRIMITIVES)
        return arch, env
