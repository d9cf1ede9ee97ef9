"""The verdicts of one test on every SM, and the live state a scan keeps to compute them: the parsed
tree and one interpreter per (SM, environment). A verdict is 'true', 'false', 'maybe' (depends on
conditions that are not architectural) or 'unknown' (the scan could not decide)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .effects import Effects
from .interp import Interpreter
from .project import Project
from .values import ClassRef, truth_of, uncertainty


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
