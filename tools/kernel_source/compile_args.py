"""Arguments and request of the ahead-of-time compile (resources.py) for one kernel config: every
parameter as a constexpr, tensor, scalar or None, with the assumptions made for values the source
does not determine, and what keeps a compile from being asked for at all."""

from __future__ import annotations

import ast
from typing import Any

from tools.pyeval.values import Unknown

from .grid import Config
from .locate import KernelDef
from .resources import compile_resources
from .scope import Scope, triton_function
from .values import Tensor


def pointer_params(fn: ast.FunctionDef, module: Scope) -> set[str]:
    """Parameters used as the base of an address (additive term of a load/store pointer, followed
    through assignments), for arguments whose type the launcher does not show."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, (ast.Add, ast.Sub)):
            assigned.setdefault(node.target.id, []).append(ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op, right=node.value))
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    found: set[str] = set()
    seen: set[str] = set()

    def additive(expr: ast.expr) -> None:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            additive(expr.left)
            additive(expr.right)
        elif isinstance(expr, ast.Name):
            if expr.id in params:
                found.add(expr.id)
            if expr.id not in seen:
                seen.add(expr.id)
                for value in assigned.get(expr.id, []):
                    additive(value)
        elif isinstance(expr, ast.Subscript):
            additive(expr.value)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("to", "cast"):
            additive(expr.func.value)

    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and triton_function(node.func, module) in (
            "load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "make_block_ptr", "make_tensor_descriptor",
        ):
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg in ("pointer", "base")), None)
            if pointer is not None:
                additive(pointer)
    return found


ALIGNED_STAND_IN = 1 << 20  # an int Triton specializes as divisible by 16 (and not as the constant 1)


def compile_arguments(
    kernel: KernelDef, values: dict[str, Any], dtypes: dict, pointers: set[str], aligned_unknown_ints: bool = True
) -> tuple[list[dict], list[str], list[str]]:
    """Arguments for the AOT compile: (args, assumptions, blockers).

    Unknown int arguments are compiled as multiples of 16 by default (``aligned_unknown_ints``),
    since that specialization changes the code (vector widths, registers) and aligned strides and
    sizes are the common case; each such choice is listed in the assumptions.
    """
    args: list[dict] = []
    assumptions: list[str] = []
    blockers: list[str] = []
    for param in kernel.params:
        value = values.get(param.name)
        name = param.name
        if param.constexpr:
            if isinstance(value, Unknown):
                fix = f"--shape {name}=true or --shape {name}=false (1 and 0 too)" if _is_flag(value.text) \
                    else f"--shape {name}=VALUE (a number)"
                blockers.append(f"constexpr {name} unknown ({value.why}); pass {fix}")
                continue
            if isinstance(value, Tensor):
                blockers.append(f"constexpr {name} receives a tensor")
                continue
            args.append({"name": name, "kind": "constexpr", "value": value})
            continue
        if name in dtypes:
            dtype, forced_pointer = dtypes[name]
            if forced_pointer or isinstance(value, Tensor) or (name in pointers and not isinstance(value, (int, float))):
                args.append({"name": name, "kind": "tensor", "dtype": dtype})
            else:
                known = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
                args.append(_scalar(name, known, dtype))
            continue
        if isinstance(value, Tensor):
            if value.dtype is None:
                blockers.append(f"dtype of tensor argument {name} unknown; pass --dtype {name}=DTYPE")
                continue
            if "assumed" in value.origin:
                assumptions.append(f"{name}: {value.origin}")
            args.append({"name": name, "kind": "tensor", "dtype": value.dtype})
        elif value is None:
            args.append({"name": name, "kind": "none"})
        elif isinstance(value, bool):
            args.append({"name": name, "kind": "bool", "value": value})
        elif isinstance(value, int):
            args.append({"name": name, "kind": "int" if -(2**31) <= value < 2**31 else "int64", "value": value})
        elif isinstance(value, float):
            args.append({"name": name, "kind": "float", "value": value})
        elif isinstance(value, Unknown):
            annotation = (param.annotation or "").replace("tl.", "").replace("triton.language.", "")
            if annotation.startswith(("float", "bfloat")):
                args.append({"name": name, "kind": "float", "value": None})
            elif annotation == "int64":
                args.append({"name": name, "kind": "int64", "value": ALIGNED_STAND_IN if aligned_unknown_ints else None})
            elif name in pointers and not annotation:
                blockers.append(f"{name} is a pointer whose dtype is not known ({value.text}); pass --dtype {name}=DTYPE")
            elif aligned_unknown_ints:
                args.append({"name": name, "kind": "int", "value": ALIGNED_STAND_IN})
                assumptions.append(
                    f"{name}: value unknown ({value.text}); compiled as a multiple of 16 (Triton specializes such ints, as "
                    "strides and sizes of aligned tensors are); pass --shape to give the value"
                )
            else:
                args.append({"name": name, "kind": "int", "value": None})
                assumptions.append(f"{name}: value unknown ({value.text}); compiled as an int32 without value specialization")
        else:
            blockers.append(f"argument {name} has a value the compile cannot take: {value!r}")
    return args, assumptions, blockers


def _is_flag(text: str) -> bool:
    """Whether the launcher's expression for a constexpr is a truth value (``x is not None``, ``a and
    b``, ``not c``): the value to pin is true or false, not a size."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)) \
        or (isinstance(node, ast.Constant) and isinstance(node.value, bool))


def _scalar(name: str, value: Any, dtype: str) -> dict:
    if dtype.startswith(("float", "bfloat")):
        return {"name": name, "kind": "float", "value": value}
    if dtype == "int64":
        return {"name": name, "kind": "int64", "value": value}
    if dtype == "bool":
        return {"name": name, "kind": "bool", "value": bool(value)}
    return {"name": name, "kind": "int", "value": value}



def config_resources(
    kdef: KernelDef, config: Config, values: dict, dtypes: dict, pointers: set[str], arch: str, enabled: bool, python: str | None, aligned_unknown_ints: bool
) -> dict:
    """Registers, spills and shared memory of one config compiled for ``arch`` (compile_resources), or
    why it was not compiled (``enabled`` False, or an argument the compile cannot take)."""
    if not enabled:
        return {"arch": arch, "ok": False, "error": "compile disabled"}
    args, assumptions, blockers = compile_arguments(kdef, values, dtypes, pointers, aligned_unknown_ints)
    if blockers:  # "blocked": the user can give what is missing; a failed compile is the compiler's
        return {"arch": arch, "ok": False, "blocked": True, "error": "; ".join(blockers), "assumptions": assumptions}
    request = {
        "kernel_file": str(kdef.file),
        "kernel_name": kdef.name,
        "arch": arch,
        "args": args,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas if config.num_ctas not in (None, 1) else None,
        "maxnreg": config.maxnreg,
    }
    usage = compile_resources(request, python=python)
    usage["assumptions"] = assumptions
    return usage

