"""What the branches of a gate lead to (imports, calls, assignments, a return or a raise), as the
scan reports them beside the gate, and the syntactic shapes of tests: whether a branch is an early
exit, the operands a test is made of."""

from __future__ import annotations

import ast

from tools.pyeval.syntax import assign_targets, dotted_name, walk_no_defs

from .index import target_names
from .labels import text
from .model import BranchPath
from .project import resolve_from

MAX_NAMES = 8


def terminates(stmts: list) -> bool:
    """Whether a block ends by leaving it (return, raise, continue, break)."""
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
        for sub in walk_no_defs(stmt):
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
                name = dotted_name(sub.func, through_calls=True)
                if name:
                    called.append(name)
            elif isinstance(sub, ast.Return) and first_return is None:
                first_return = sub
            elif isinstance(sub, ast.Raise) and first_raise is None:
                first_raise = sub
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            for target in assign_targets(stmt):
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
            name = dotted_name(stmt.value.func, through_calls=True) or ""
            if name.startswith(EXIT_PREAMBLE_CALLS) or name in ("print", "warn"):
                continue
        return False
    if isinstance(last, (ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(last, ast.Return):
        value = last.value
        return value is None or (isinstance(value, ast.Constant) and (value.value is None or value.value is False))
    return False



def atoms(test: ast.AST) -> list:
    """The operands a test is made of, through `and`/`or`/`not` and comparisons (constants left out)."""
    if isinstance(test, ast.BoolOp):
        return [a for v in test.values for a in atoms(v)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return atoms(test.operand)
    if isinstance(test, ast.Compare):
        return [a for v in [test.left, *test.comparators] for a in atoms(v)]
    if isinstance(test, ast.Constant):
        return []
    return [test]


def atom_kind(atom: ast.AST) -> str:
    """How a test operand reads its value: 'call', 'attr' or 'const'."""
    if isinstance(atom, ast.Call):
        return "call"
    if isinstance(atom, ast.Attribute):
        return "attr"
    if isinstance(atom, ast.Name):
        return "const"
    if isinstance(atom, ast.Subscript):
        return atom_kind(atom.value)
    return "call" if any(isinstance(s, ast.Call) for s in ast.walk(atom)) else "const"
