"""The value records both evaluators produce besides plain Python values.

``Unknown`` is the one answer for "the source does not tell": it stands for some source text and says
why it is unknown. An evaluator that tracks more about its unknowns (the gates scan: what they depend
on, whether that looked architecture-related, what is known of their truthiness) fills the optional
fields; one that does not leaves them at their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True, repr=False)
class Unknown:
    """A value the source does not determine statically.

    - ``text``: the source text it stands for (an expression or a name); '' for an unknown computed
      from several others, which ``labels`` then name.
    - ``why``: the reason it is unknown, for a reader ("not defined in the analyzed source",
      "ZeroDivisionError: division by zero"). It takes no part in equality or hashing: two unknowns
      that stand for the same thing are the same value whatever each was told, so joining branches
      does not multiply them by their reasons.
    - ``labels``: source texts of what it depends on (the conditions a path-following evaluator
      reports for an undecided result).
    - ``arch``: one of those dependencies looked architecture-related and stayed unresolved.
    - ``truth``: its truthiness where known (None: not known); ``not_none``: known not to be None.

    ``repr``: ``Unknown('text': why)`` for an unknown standing for a text, else its identifying
    fields (``Unknown(labels=..., arch=..., truth=..., not_none=...)``).
    """

    text: str = ""
    why: str = field(default="", compare=False)
    labels: frozenset = frozenset()
    arch: bool = False
    truth: bool | None = None
    not_none: bool = False

    def with_truth(self, truth: bool | None) -> "Unknown":
        """The same unknown seen where its truthiness is ``truth`` (a true value is not None)."""
        return Unknown(self.text, self.why, self.labels, self.arch, truth, self.not_none or truth is True)

    def because(self, why: str) -> "Unknown":
        """The same unknown with ``why`` as its reason."""
        return Unknown(self.text, why, self.labels, self.arch, self.truth, self.not_none)

    def __repr__(self) -> str:
        # Deterministic and stable: the gates scan orders alternatives by repr, so an unknown known
        # by its dependencies shows exactly its identifying fields (the reason takes no part).
        if self.text:
            return f"Unknown({self.text!r}: {self.why})"
        return f"Unknown(labels={self.labels!r}, arch={self.arch!r}, truth={self.truth!r}, not_none={self.not_none!r})"


@dataclass(frozen=True)
class ModuleRef:
    """A module (or a dotted attribute of one) by its dotted name. Which modules an evaluator knows
    is its own business: the gates scan names modules of the scanned tree, the kernel-source
    evaluator the few outside modules it models (triton, torch, math)."""

    name: str


@dataclass(frozen=True, repr=False)
class Builtin:
    """A Python builtin as a value (``int``, ``len``): ``fn`` is how the evaluator applies it, with
    whatever signature that evaluator calls it by. Equal by name."""

    name: str
    fn: Callable[..., Any] = field(compare=False, hash=False)

    def __repr__(self) -> str:
        return f"<builtin {self.name}>"
