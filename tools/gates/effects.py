"""What one evaluation of the gate interpreter carries: the frame it runs in, the side facts it
collects (`Effects`), and the budget that stops it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .values import ClassRef


class Budget(Exception):
    """Raised when a helper body runs more statements than the interpreter allows one frame; the
    entry points turn it into an unknown with that reason."""


@dataclass
class EnvRead:
    name: str
    default: Any
    defined_at: str | None


@dataclass
class Effects:
    """What an evaluation touched, beyond its value."""

    touched_arch: bool = False
    env_reads: dict = field(default_factory=dict)  # name -> EnvRead
    probes: set = field(default_factory=set)  # modules whose import may fail
    helpers: dict = field(default_factory=dict)  # defined_at -> (name, depth below the site, module)
    unresolved: dict = field(default_factory=dict)  # text -> reason
    notes: set = field(default_factory=set)
    cut: bool = False  # depends on a depth or recursion cut: not memoised

    def merge(self, other: "Effects", depth: int = 0) -> None:
        self.touched_arch = self.touched_arch or other.touched_arch
        for name, read in other.env_reads.items():
            self.env_reads.setdefault(name, read)
        self.probes |= other.probes
        for key, (name, level, module) in other.helpers.items():
            known = self.helpers.get(key)
            if known is None or known[1] > level + depth:
                self.helpers[key] = (name, level + depth, module)
        for key, value in other.unresolved.items():
            self.unresolved.setdefault(key, value)
        self.notes |= other.notes
        self.cut = self.cut or other.cut


@dataclass
class Frame:
    module: str
    mode: str  # "exec" (a helper being run), "site" (a test in place), "global" (module level)
    chain: tuple = ()  # enclosing function nodes, innermost last (site and exec)
    locals: dict | None = None  # exec mode
    cls: ClassRef | None = None
    self_value: Any = None
    steps: int = 0
    site: "Frame | None" = None  # a comprehension's enclosing frame, for names it does not bind
