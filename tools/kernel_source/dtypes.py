"""Tensor element types as the kernel-source evaluator models them: the spellings of torch, Triton and
users mapped to one canonical torch name, and what torch factories and tensor methods do to a dtype.

Nothing here evaluates source: callers pass values already evaluated (``Tensor``, ``DType``, strings).
"""

from __future__ import annotations

from typing import Any

from .values import DType, Tensor, Unknown

# torch attribute name -> canonical torch dtype name
TORCH_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int": "int32",
    "int64": "int64",
    "long": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
}
# Triton language scalar types (tl.float32 ...) -> the same canonical names
TL_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "int1": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float8e4nv": "float8_e4m3fn",
    "float8e5": "float8_e5m2",
}
# Short spellings accepted from users (--dtype NAME=bf16)
DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "fp32": "float32",
    "f32": "float32",
    "fp64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "i1": "bool",
    "u1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "e5m2": "float8_e5m2",
}

# Methods that keep a tensor's dtype
SAME_DTYPE_METHODS = {
    "contiguous", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "flatten", "as_strided",
    "expand", "expand_as", "narrow", "select", "clone", "detach", "t", "view_as", "reshape_as",
    "squeeze_", "unsqueeze_", "movedim", "swapaxes", "unflatten", "split", "chunk", "index_select",
    "repeat", "mT", "T", "flip", "roll", "__getitem__", "cuda", "cpu",
}
# Methods that convert a tensor to one dtype (``x.float()``)
DTYPE_METHODS = {
    "float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
    "int": "int32", "long": "int64", "bool": "bool", "byte": "uint8", "char": "int8", "short": "int16",
}
_TORCH_FACTORIES = {"empty", "zeros", "ones", "full", "randn", "rand", "randint", "tensor", "empty_strided", "arange"}
_TORCH_LIKE_FACTORIES = {"empty_like", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like"}


def canonical_dtype(name: str) -> str:
    """Canonical torch dtype name for a user's spelling (bf16, torch.bfloat16, tl.float32, int32...)."""
    key = name.strip()
    for prefix in ("torch.", "tl.", "triton.language."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key.startswith("*"):
        key = key[1:]
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    if key in TORCH_DTYPES:
        return TORCH_DTYPES[key]
    if key in TL_DTYPES:
        return TL_DTYPES[key]
    raise ValueError(f"unknown dtype {name!r}")


def dtype_of(value: Any) -> str | None:
    """The canonical dtype a value names (a ``DType``, or a string spelling one), else None."""
    if isinstance(value, DType):
        return value.name
    if isinstance(value, str):
        try:
            return canonical_dtype(value)
        except ValueError:  # a string that is no dtype's name
            return None
    return None


def torch_call(name: str, args: list, kwargs: dict, text: str) -> Any:
    """The result of ``torch.<name>(...)`` (at ``text``) as far as its dtype goes."""
    dtype = dtype_of(kwargs.get("dtype"))
    if name in _TORCH_FACTORIES:
        if dtype:
            return Tensor(dtype, f"dtype={dtype} in `{text}`")
        if name == "arange":
            return Tensor("int64", f"torch.arange default int64 in `{text}`")
        if name == "randint":
            return Tensor("int64", f"torch.randint default int64 in `{text}`")
        return Tensor("float32", f"torch default dtype float32 in `{text}`")
    if name in _TORCH_LIKE_FACTORIES:
        if dtype:
            return Tensor(dtype, f"dtype={dtype} in `{text}`")
        base = args[0] if args else None
        if isinstance(base, Tensor):
            return Tensor(base.dtype, f"like its input in `{text}`")
        return Unknown(text, "dtype of the input tensor unknown")
    if name in ("cat", "stack", "concat"):
        parts = args[0] if args else ()
        if isinstance(parts, (tuple, list)):
            dtypes = {p.dtype for p in parts if isinstance(p, Tensor)}
            if len(dtypes) == 1:
                return Tensor(dtypes.pop(), f"from the inputs of `{text}`")
        return Unknown(text, "dtype of the inputs unknown")
    return Unknown(text, f"torch.{name} is not evaluated")
