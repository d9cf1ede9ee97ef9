"""Kernel names by meaning (issue 30): a trace's mangled and long templated kernel names, demangled and named.

The PyTorch profiler records most kernels demangled, but not all: the H200 example's grouped-experts GEMM is
``_ZN7cutlass13device_kernel...`` (1,270 characters), and a table cut to 100 characters says nothing of it.
``kernel_names`` runs on the box, into the bench tool's result: ``c++filt``'s output depends on its binutils
version, and a journal's replay on another machine serves the result as recorded, so a report drawn anywhere
reads the same. Without ``c++filt`` on the box the map says so (``demangled`` null, ``why``) instead of guessing.

A meaning is read off the demangled name by a few rules (``FAMILIES``), each matching what the name itself
says (its namespace and template, the GMMA atom's element types); a name no rule matches has meaning null.
The operation that launched a kernel (tools.trace.attribute over the eager trace) adds "MoE" only where every
operation that launched it is an expert one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A name longer than this and templated is listed though the profiler demangled it: a table cell cuts it
# (agent.steps.attribution.NAME_WIDTH is the same width).
LONG_NAME = 100
DEMANGLE_TIMEOUT_S = 60

# (regex searched in the demangled name, what the kernel is), first match wins. Each is a family whose
# name says what it computes: CUTLASS's GemmUniversal kernel, grouped when its problem shape is
# GroupProblemShape (cutlass/gemm/group_array_problem_shape.hpp); the rest are PyTorch's, cuBLASLt's and
# CUB's kernel templates by their own names.
FAMILIES: tuple[tuple[str, str], ...] = (
    (r"cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<", "CUTLASS grouped GEMM"),
    (r"cutlass::gemm::kernel::GemmUniversal<", "CUTLASS GEMM"),
    (r"^void at::cuda::detail::prepare_grouped_gemm_data<", "grouped GEMM argument setup"),
    (r"^void cublasLt::splitKreduce_kernel<", "cuBLASLt split-K reduction"),
    (r"^void at::native::reduce_kernel<", "PyTorch reduction"),
    (r"^void at::native::(vectorized_|unrolled_)?elementwise_kernel<", "PyTorch elementwise"),
    (r"^void at::native::index_elementwise_kernel<", "PyTorch indexing"),
    (r"^void at::native::(\(anonymous namespace\)::)?CatArrayBatchedCopy", "PyTorch cat"),
    (r"^void at::native::sbtopk::gatherTopK<", "PyTorch top-k"),
    (r"^void at::native::(bitonic|radix)SortKVInPlace<", "PyTorch sort"),
    (r"^void at::native::_scatter_gather_elementwise_kernel<", "PyTorch scatter/gather"),
    (r"cub::detail::scan::DeviceScan\w*Kernel<", "CUB scan"),
    # the real sglang 0.5.17 server's DeepSeek-V4 decode on sm_90 (tests/data/real-sglang-0517-h100): FlashMLA's
    # and DeepGEMM's kernels, by their namespaces and kernel names as their sources spell them
    (r"::flash_fwd_splitkv_mla_fp8_sparse_kernel<", "FlashMLA sparse decode (fp8 KV cache)"),
    (r"::flash_fwd_mla_combine_kernel<", "FlashMLA split-KV combine"),
    (r"^void deep_gemm::sm90_fp8_paged_mqa_logits<", "DeepGEMM indexer logits (fp8, paged MQA)"),
    (r"^void deep_gemm::sm90_tf32_hc_prenorm_gemm_impl<", "DeepGEMM hyper-connection pre-norm GEMM (tf32)"),
    (r"^void deep_gemm::sm90_fp8_gemm_\w+<", "DeepGEMM GEMM (fp8)"),
    (r"::per_token_group_quant\w*<", "activation FP8 group quantization"),
    (r"^void flashinfer::norm::RMSNormKernel<", "FlashInfer RMSNorm"),
    (r"^void moe_align_block_size\w*<", "MoE token alignment to expert blocks"),
)

# Element types as C++ spells them (PyTorch, CUTLASS, CUDA) and as a GMMA atom does (F32BF16BF16: C, A, B).
DTYPES = {"float": "fp32", "double": "fp64", "c10::BFloat16": "bf16", "cutlass::bfloat16_t": "bf16",
          "__nv_bfloat16": "bf16", "c10::Half": "fp16", "cutlass::half_t": "fp16", "__half": "fp16",
          "cutlass::float_e4m3_t": "fp8 e4m3", "cutlass::float_e5m2_t": "fp8 e5m2", "long": "int64", "int": "int32",
          "BF16": "bf16", "F16": "fp16", "F32": "fp32", "TF32": "tf32", "E4M3": "fp8 e4m3", "E5M2": "fp8 e5m2",
          "S8": "int8", "U8": "uint8"}
_GMMA_ATOM = re.compile(r"::MMA_\d+x\d+x\d+_((?:TF32|BF16|F16|F32|E4M3|E5M2|S32|S8|U8)+)_")
_GMMA_TYPES = re.compile(r"TF32|BF16|F16|F32|E4M3|E5M2|S32|S8|U8")
_CUTLASS_TYPE = re.compile(r"cutlass::(bfloat16_t|half_t|float_e4m3_t|float_e5m2_t)")
# The PyTorch templates' wrappers around the functor that names the operation.
_WRAPPERS = {"elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "gpu_kernel_impl",
             "gpu_kernel_impl_nocast", "BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "UnaryFunctor"}
_NATIVE_NAME = re.compile(r"at::native::(?:binary_internal::|\(anonymous namespace\)::)?([A-Za-z_]\w*)(<[^<>(]*>?)?")
_REDUCTIONS = (("MeanOps", "mean"), ("sum_functor", "sum"), ("MaxNanFunctor", "max"), ("MinNanFunctor", "min"),
               ("NormOps", "norm"), ("ArgMaxOps", "argmax"), ("ArgMinOps", "argmin"), ("prod_functor", "prod"))
_REDUCE_TYPE = re.compile(r"ReduceOp<([\w:]+),")
_EXPERTS = re.compile(r"expert|moe", re.IGNORECASE)


def listed(name: str) -> bool:
    """A name the map holds: mangled C++ (``_Z``), or templated and longer than a table's cell."""
    return name.startswith("_Z") or (len(name) > LONG_NAME and "<" in name)


def _dtype(text: str | None) -> str | None:
    return DTYPES.get(text.strip()) if text else None


def _gemm_dtype(demangled: str) -> str | None:
    """A CUTLASS GEMM's input type: its GMMA atom's A and B (MMA_64x128x16_F32BF16BF16: C fp32, A and B bf16;
    cute/arch/mma_sm90_gmma.hpp names them so), else the first CUTLASS element type in its template."""
    atom = _GMMA_ATOM.search(demangled)
    if atom:
        types = _GMMA_TYPES.findall(atom.group(1))
        if len(types) == 3:
            a, b = _dtype(types[1]), _dtype(types[2])
            return a if a == b else f"{a} x {b}"
    first = _CUTLASS_TYPE.search(demangled)
    return _dtype(f"cutlass::{first.group(1)}") if first else None


def _elementwise_op(demangled: str) -> tuple[str | None, str | None]:
    """The operation a PyTorch elementwise kernel runs, from the first functor or kernel function its wrappers
    hold (MulFunctor<float>: mul, fp32; CUDAFunctor_add<c10::BFloat16>: add, bf16; exp_kernel_cuda: exp), and
    its element type where the functor's template gives it; (None, None) when none is found."""
    for match in _NATIVE_NAME.finditer(demangled):
        ident, args = match.group(1), match.group(2)
        if ident in _WRAPPERS:
            continue
        functor = re.fullmatch(r"CUDAFunctor(?:OnSelf)?_(\w+)|(\w+)Functor|(\w+?)_kernel(?:_cuda|_impl)?|launch_(\w+)", ident)
        if functor:
            op = next(g for g in functor.groups() if g)
            dtype = _dtype(args[1:-1].split(",")[0]) if args and args.endswith(">") else None
            return (op.lower() if functor.group(2) else op).replace("_", " "), dtype
    return None, None


def meaning(demangled: str | None, operations: Sequence[str] = ()) -> str | None:
    """What a kernel is, in a few words, from its demangled name (FAMILIES) and the operations that launched it;
    None when no rule knows the name."""
    if not demangled:
        return None
    family = next((what for pattern, what in FAMILIES if re.search(pattern, demangled)), None)
    if family is None:
        return None
    op, dtype = None, None
    if family.startswith("CUTLASS"):
        dtype = _gemm_dtype(demangled)
    elif family == "grouped GEMM argument setup":
        dtype = _dtype(demangled.split("<", 1)[1].split(",")[0])
    elif family == "PyTorch elementwise":
        op, dtype = _elementwise_op(demangled)
    elif family == "PyTorch reduction":
        op = next((what for key, what in _REDUCTIONS if key in demangled), None)
        found = _REDUCE_TYPE.search(demangled)
        dtype = _dtype(found.group(1)) if found else None
    # MoE only where every operation that launched it says experts: a GEMM the attention also runs is not MoE's
    moe = bool(operations) and all(_EXPERTS.search(o) for o in operations)
    qualifiers = ", ".join(q for q in ("MoE" if moe else None, dtype) if q)
    return family + (f" {op}" if op else "") + (f" ({qualifiers})" if qualifiers else "")


def demangler() -> str | None:
    """The box's ``c++filt`` as its own first line of ``--version`` says (binutils' version), or None without one."""
    path = shutil.which("c++filt")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=DEMANGLE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.splitlines() or [path])[0].strip() or path


def demangle(names: Sequence[str]) -> tuple[dict[str, str | None], str | None]:
    """Each mangled name through ``c++filt``, one a line; returns ({name: demangled or None}, why none).
    ``-r`` (--no-recurse-limit): binutils' demangler gives up past a recursion depth that CUTLASS's kernel
    templates pass (c++filt 2.40 hands the H200 example's grouped GEMM back unchanged without it); a
    c++filt too old for ``-r`` is run without it. A name handed back unchanged was not demangled."""
    if not names:
        return {}, None
    path = shutil.which("c++filt")
    if path is None:
        return {n: None for n in names}, "c++filt (binutils) is not on this box's PATH"
    text = "\n".join(names) + "\n"
    out = None
    for argv in ([path, "-r"], [path]):
        try:
            out = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=DEMANGLE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            return {n: None for n in names}, f"c++filt failed: {exc}"
        if out.returncode == 0:
            break
    lines = out.stdout.splitlines() if out is not None and out.returncode == 0 else []
    if len(lines) != len(names):
        return {n: None for n in names}, f"c++filt gave {len(lines)} lines for {len(names)} names"
    return {n: (d if d != n else None) for n, d in zip(names, lines)}, None


def _operations(attribution) -> dict[str, list[str]]:
    """Kernel name -> the operations (launching frames) attribution placed its launches in, largest first;
    the rows that name no frame (a graph replay, no launch, no frame) are left out."""
    found: dict[str, list[str]] = {}
    for row in attribution.rows:
        if row.name.startswith("("):
            continue
        for kernel in row.kernels:
            found.setdefault(kernel.name, []).append(row.name)
    return found


def kernel_names(files: Sequence[str | Path], eager_files: Sequence[str | Path] = ()) -> dict[str, dict[str, Any]]:
    """The map the bench result carries: {name: {"demangled", "meaning", "operations"[, "demangled_by"][, "why"]}}
    for every listed name (``listed``) among the kernels of ``files`` and ``eager_files``. ``demangled``: the
    name readable (the name itself where the profiler already demangled it); ``demangled_by``: the c++filt
    that did it; ``why``: why it is null. ``operations``: what launched it, attributed over the eager files
    (the setting's own files where there are none: a graph replay names no frame). Raises
    tools.trace.TraceFormatError on an unreadable trace."""
    from . import attribute, summarize

    names: list[str] = []
    for path in [*files, *eager_files]:
        names += [k.name for k in summarize([path]).merged.kernels if listed(k.name) and k.name not in names]
    if not names:
        return {}
    operations: dict[str, list[str]] = {}
    for path in eager_files or files:
        for name, ops in _operations(attribute([path])).items():
            operations.setdefault(name, []).extend(o for o in ops if o not in operations.get(name, []))
    mangled = [n for n in names if n.startswith("_Z")]
    demangled, why = demangle(mangled)
    by = demangler() if mangled and why is None else None
    out = {}
    for name in sorted(names):
        readable = demangled.get(name) if name in demangled else name
        ops = operations.get(name, [])
        entry: dict[str, Any] = {"demangled": readable, "meaning": meaning(readable, ops), "operations": ops}
        if name in demangled:
            entry.update({"demangled_by": by} if readable else {"why": why or f"c++filt ({by}) left it mangled"})
        out[name] = entry
    return out
