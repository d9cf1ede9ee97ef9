"""The core the two static Python evaluators share: ``tools.gates`` (what an engine's capability gates
evaluate to on each architecture, following several path states) and ``tools.kernel_source`` (a
kernel's launch grid and resources at given shapes, merging branches into unknowns).

Neither imports nor runs the code it reads. What they share is what reading Python statically needs
whatever the question: Python's operators with guards against values too large to build (``operators``),
names and shapes of syntax (``syntax``), the value records both produce (``values``: one ``Unknown``
that says why, ``ModuleRef``, ``Builtin``), the builtins safe to apply to known values
(``builtins``), and how values flow into assignment targets, parameters and comprehensions
(``binding``). How to evaluate an expression, and what to do with an unknown, stays with each
evaluator.
"""
