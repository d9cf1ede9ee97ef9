"""Relevance: which in-tree names and attribute names can carry an architecture or an environment
variable into a test, found by a syntactic closure over the pre-pass summaries (prepass.py). It
only picks what to interpret; the interpreter decides what actually depends on either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .index import ENV_PRIMITIVES, looks_arch
from .prepass import FileSummary

# Calls that read the device's compute capability: everything else the scan learns about an
# architecture is derived from these by reading the tree's own definitions. Device properties count
# only when their major/minor is read.
CAPABILITY_TOKENS = frozenset({"get_device_capability", "nvmlDeviceGetCudaComputeCapability", "get_device_properties.major"})
# An attribute name used in more files than this is too common to carry relevance by name alone.
COMMON_ATTR_FILES = 60


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


class _Candidate(NamedTuple):
    """A definition that may carry relevance: `kind` is def, method, self (an instance attribute),
    field (a class attribute), const (a module constant) or dict (a module dispatch table)."""

    kind: str
    name: str  # bare name; the attribute name for methods, instance attributes and fields
    qname: str | None  # qualified in-tree name (None for attribute-level kinds)
    refs: frozenset  # qualified names it mentions, resolved through the module's imports
    attrs: frozenset  # attribute names it mentions
    raw: frozenset  # names it mentions as written; a dispatch table's string values


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
    candidates = _candidates(summaries, resolver)
    attr_files: dict = {}
    for s in summaries:
        for a in s.attrs:
            attr_files[a] = attr_files.get(a, 0) + 1

    arch_qualified, arch_attrs = _closure(
        candidates, attr_files, CAPABILITY_TOKENS, set(), {"def", "method", "self", "field", "const", "dict"}
    )
    # Dispatch tables map attribute names to helper names: a key whose helper is relevant is an
    # attribute name that carries the architecture.
    relevant_bare = {q.rpartition(".")[2] for q in arch_qualified}
    for s in summaries:
        for name, pairs in s.dicts:
            if f"{s.module}.{name}" in arch_qualified:
                arch_attrs.update(k for k, v in pairs if v in relevant_bare)

    registry_instances, env_fields = _env_registries(summaries)
    env_qualified, env_attrs = _closure(candidates, attr_files, ENV_PRIMITIVES | frozenset(env_fields), registry_instances, {"def", "const"})
    return Relevance(
        resolver=resolver,
        arch_qualified=frozenset(arch_qualified),
        arch_attrs=frozenset(arch_attrs),
        env_qualified=frozenset(env_qualified),
        env_attrs=frozenset(env_attrs) | frozenset(env_fields),
    )


def _candidates(summaries: list[FileSummary], resolver: Resolver) -> list[_Candidate]:
    """Every definition the closure may grow into: helper-sized public functions and methods that
    return a value, assignments (module constants, class fields, instance attributes) and
    module-level dispatch tables."""
    out = []
    for s in summaries:
        def resolved(names):
            found = set()
            for token in names:
                q = resolver.ref(s, token)
                if q is not None:
                    found.add(q)
            return frozenset(found)

        for d in s.defs:
            if not (d.small and d.returns_value and _public(d.name)):
                continue
            out.append(_Candidate("method" if d.is_method else "def", d.name, f"{s.module}.{d.qualname}", resolved(d.names), d.attrs, d.names))
        for a in s.assigns:
            for t in a.targets:
                if a.scope == "method":
                    out.append(_Candidate("self", t[5:], None, resolved(a.names), a.attrs, a.names))
                elif a.scope == "class":
                    out.append(_Candidate("field", t, None, resolved(a.names), a.attrs, a.names))
                elif _public(t):
                    out.append(_Candidate("const", t, f"{s.module}.{t}", resolved(a.names), a.attrs, a.names))
        for name, pairs in s.dicts:
            out.append(_Candidate("dict", name, f"{s.module}.{name}", frozenset(), frozenset(), frozenset(v for _, v in pairs)))
    return out


def _closure(candidates: list[_Candidate], attr_files: dict, seeds: frozenset, extra_qualified: set, allow: set) -> tuple[set, set]:
    """(qualified names, attribute names) reached from `seeds` through the candidates of the kinds in
    `allow`, grown until nothing is added. `attr_files` counts the files mentioning each attribute
    name: one too common (COMMON_ATTR_FILES) does not carry relevance by name."""
    qualified = set(extra_qualified)
    attrs = set(seeds)  # attribute names that carry relevance into other definitions
    terminal = set()  # attribute names matched in tests only (instance attributes, fields)
    bare_values = set()  # plain names of relevant definitions, for dispatch-table values
    grown = True
    while grown:
        grown = False
        for kind, name, qname, refs, item_attrs, raw in candidates:
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


def _env_registries(summaries: list[FileSummary]) -> tuple[set, set]:
    """(qualified module-level instances of environment registries, their field names). A field
    class is one whose `get` reads the environment, or a subclass of one; a registry is a class with
    fields made by a field class."""
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
    return registry_instances, env_fields


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
