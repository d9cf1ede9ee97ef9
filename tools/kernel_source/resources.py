"""Registers, spills and shared memory of a Triton kernel for a GPU architecture, with no GPU.

The kernel is compiled ahead of time by Triton itself for ``GPUTarget('cuda', CC, 32)``, with the
argument specialization Triton's launcher would apply (its own binder, fed stand-in tensors that
carry only a dtype: a tensor's data pointer is taken as 16-byte aligned, as PyTorch allocations
are). Resource usage comes from Triton's own ptxas run (``-v`` log, captured) and is cross-checked
against the cubin's resource table (the bundled ``cuobjdump --dump-resource-usage``), which is what
the driver reports as ``n_regs`` at load time.

The kernel's source file usually imports more than Triton (torch, the serving engine), so only
the kernel, the ``@triton.jit`` helpers and module constants it uses are copied into a scratch
module and imported from there.

Runs in this process, or in another interpreter (``python=``; e.g. one with another Triton
version) as ``python -m tools.kernel_source.resources`` reading a JSON request on stdin.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.pyeval.syntax import assign_targets, bound_names

from .locate import is_triton_kernel
from .platforms import cuda_platform_condition


@dataclass
class ResourceUsage:
    arch: str
    ok: bool
    error: str | None = None
    triton_version: str | None = None
    ptxas: str | None = None
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_frame: int | None = None
    shared_static: int | None = None
    shared_dynamic: int | None = None  # Triton's metadata.shared, launched as dynamic shared memory
    shared_per_block: int | None = None
    cubin: dict = field(default_factory=dict)  # cuobjdump resource table: REG, STACK, SHARED, LOCAL
    # What Triton's launcher reports on a GPU as kernel.n_spills: the driver's local memory size per
    # thread (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) / 4; the cubin's per-function stack is that size.
    triton_n_spills: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    signature: dict = field(default_factory=dict)
    source_notes: list[str] = field(default_factory=list)  # how the kernel's source was adapted for the copy
    compile_seconds: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# the scratch module


def _top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    defined: dict[str, ast.stmt] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for target in assign_targets(stmt):
                for name in bound_names(target):
                    defined[name] = stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                defined[(alias.asname or alias.name).split(".")[0]] = stmt
    return defined


def _free_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _module_file(module: str, level: int, importer: Path) -> Path | None:
    """The file of ``module`` imported from ``importer`` (absolute via its package root, or relative)."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        parts = module.split(".") if module else []
    else:
        root = importer.parent
        while (root.parent / "__init__.py").exists():
            root = root.parent
        base = root.parent
        parts = module.split(".")
    candidate = base.joinpath(*parts)
    for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if path.is_file():
            return path
    return None


def _strip_to_jit(node: ast.FunctionDef) -> ast.FunctionDef:
    clone = copy.copy(node)
    clone.decorator_list = [d for d in node.decorator_list if _is_jit_decorator(d)]
    return clone


def _is_jit_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (isinstance(target, ast.Name) and target.id == "jit")


class _PlatformFolder(ast.NodeTransformer):
    """Folds ``A if is_hip() else B`` (and the like) in copied module constants for a CUDA target."""

    def __init__(self) -> None:
        self.folded: list[str] = []

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        verdict = cuda_platform_condition(ast.unparse(node.test))
        if verdict is None:
            return node
        self.folded.append(f"`{ast.unparse(node.test)}` taken as {verdict} (CUDA target)")
        return node.body if verdict else node.orelse


def extract_kernel_module(kernel_file: Path, kernel_name: str, notes: list[str] | None = None) -> str:
    """Source of a module holding only ``kernel_name`` and what it needs (jit helpers, constants, imports).

    Names imported from other files of the same package tree are followed and copied in; module
    constants chosen by a platform test are folded for CUDA (each fold appended to ``notes``).
    Raises ValueError when something the kernel needs cannot be copied.
    """
    pieces: dict[tuple[str, str], str] = {}
    order: list[tuple[str, str]] = []
    imports: list[str] = ["import triton", "import triton.language as tl"]

    def visit_file(path: Path, wanted: set[str], seen: set[tuple[str, str]]) -> None:
        text = path.read_text()
        tree = ast.parse(text)
        defined = _top_level(tree)
        queue = list(wanted)
        while queue:
            name = queue.pop()
            key = (str(path), name)
            if key in seen:
                continue
            seen.add(key)
            stmt = defined.get(name)
            if stmt is None:
                continue  # a builtin, or a name bound inside the function
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                _visit_import(stmt, name, path, seen)
                continue
            if isinstance(stmt, ast.ClassDef):
                raise ValueError(f"{path}:{stmt.lineno}: the kernel uses class {name}, which cannot be copied")
            node = _strip_to_jit(stmt) if isinstance(stmt, ast.FunctionDef) and is_triton_kernel(stmt) else stmt
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                folder = _PlatformFolder()
                node = folder.visit(copy.deepcopy(stmt))
                if notes is not None:
                    notes.extend(f"{name}: {fold}" for fold in folder.folded)
            needs = _free_names(node) - {name}
            if isinstance(stmt, ast.FunctionDef):
                needs -= {a.arg for a in stmt.args.args + stmt.args.kwonlyargs + stmt.args.posonlyargs}
            queue.extend(sorted(needs))
            piece_key = (str(path), f"{stmt.lineno:08d}")
            if piece_key not in pieces:
                pieces[piece_key] = ast.unparse(node)
                order.append(piece_key)

    def _visit_import(stmt: ast.Import | ast.ImportFrom, name: str, importer: Path, seen: set) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    line = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    if alias.name.split(".")[0] in ("triton", "math", "typing", "functools"):
                        if line not in imports:
                            imports.append(line)
                    else:
                        raise ValueError(f"the kernel uses module {alias.name}, which is not Triton")
            return
        for alias in stmt.names:
            if (alias.asname or alias.name) != name:
                continue
            module = stmt.module or ""
            if stmt.level == 0 and module.split(".")[0] in ("triton", "math", "typing", "functools", "__future__"):
                line = f"from {module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                if line not in imports:
                    imports.append(line)
                return
            source = _module_file(module, stmt.level, importer)
            if source is None:
                raise ValueError(f"the kernel uses {name} from {'.' * stmt.level}{module}, whose file is not in the source tree")
            visit_file(source, {alias.name}, seen)
            if alias.asname and alias.asname != alias.name:
                key = (str(source), f"zz-alias-{alias.asname}")
                pieces[key] = f"{alias.asname} = {alias.name}"
                order.append(key)

    visit_file(Path(kernel_file), {kernel_name}, set())
    # definitions in source order per file; aliases after what they name
    body = [pieces[k] for k in sorted(order, key=lambda k: (k[1].startswith("zz-"), k[0] != str(kernel_file), k))]
    header = '"""Scratch copy of a Triton kernel and its helpers for ahead-of-time compilation."""\n'
    return header + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(body) + "\n"


def load_kernel(kernel_file: Path, kernel_name: str, workdir: Path, notes: list[str] | None = None):
    """Import the scratch module and return the kernel's JITFunction."""
    text = extract_kernel_module(kernel_file, kernel_name, notes)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = workdir / f"_ks_{kernel_name}_{digest}.py"
    path.write_text(text)
    module_name = path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, kernel_name)


# ---------------------------------------------------------------------------------------------
# compiling


class _DType:
    """Prints like a torch dtype, which is all Triton's specializer reads of it."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


# Triton's native specializer caches a dtype's type string by the dtype object's identity (torch's
# dtypes are immortal singletons). A short-lived stand-in would let a later one reuse its address
# and inherit its type string (an int32 pointer read as uint8), so there is one per name, kept.
_DTYPES: dict[str, _DType] = {}


def _dtype(name: str) -> _DType:
    return _DTYPES.setdefault(name, _DType(name))


class DtypeOnlyTensor:
    """Stand-in for a tensor argument at compile time: a dtype and a 16-byte aligned address."""

    def __init__(self, dtype: str):
        self.dtype = _dtype(dtype)

    @staticmethod
    def data_ptr() -> int:
        return 0

    @staticmethod
    def ptr_range() -> int:
        return 0


_UNSPECIALIZED_INT = 2**31 - 1  # not 1 and not a multiple of 16: no value specialization


def _argument(spec: dict):
    kind = spec["kind"]
    if kind == "tensor":
        return DtypeOnlyTensor(spec["dtype"])
    if kind == "int":
        return int(spec["value"]) if spec.get("value") is not None else _UNSPECIALIZED_INT
    if kind == "int64":
        return int(spec["value"]) if spec.get("value") is not None else 2**40 + 1
    if kind == "float":
        return float(spec.get("value") if spec.get("value") is not None else 1.5)
    if kind == "bool":
        return bool(spec["value"])
    if kind == "none":
        return None
    if kind == "constexpr":
        return spec["value"]
    raise ValueError(f"unknown argument kind {kind!r}")


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_CUOBJDUMP = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")


def parse_ptxas_log(log: str) -> dict:
    out: dict = {}
    if m := _PTXAS_REGS.search(log):
        out["registers"] = int(m.group(1))
    if m := _PTXAS_SPILLS.search(log):
        out["stack_frame"], out["spill_stores"], out["spill_loads"] = (int(g) for g in m.groups())
    m = _PTXAS_SMEM.search(log)
    out["shared_static"] = int(m.group(1)) if m else 0
    return out


def parse_cuobjdump(text: str, kernel_name: str) -> dict:
    block = text.split(f"Function {kernel_name}:", 1)
    if len(block) < 2:
        return {}
    line = block[1].strip().splitlines()[0]
    return {k: int(v) for k, v in _CUOBJDUMP.findall(line)}


def compile_in_process(request: dict) -> dict:
    """Compile per ``request`` with the Triton importable here; the ResourceUsage as a dict."""
    arch = request["arch"]
    cc = int(str(arch).removeprefix("sm_").rstrip("a"))
    usage = ResourceUsage(arch=f"sm_{cc}", ok=False, num_warps=request.get("num_warps"), num_stages=request.get("num_stages"))
    try:
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia import compiler as nvidia
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.jit import create_function_from_signature
    except Exception as exc:  # any failure inside Triton's own import means no usable Triton here: reported
        usage.error = f"Triton not importable: {type(exc).__name__}: {exc}"
        return usage.to_dict()
    usage.triton_version = triton.__version__
    started = time.perf_counter()
    sass_mix: dict[str, int] = {}
    sass_loops: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kernel_source_") as workdir, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Triton's deprecation notices are not results
        try:
            fn = load_kernel(Path(request["kernel_file"]), request["kernel_name"], Path(workdir), usage.source_notes)
            target = GPUTarget("cuda", cc, 32)
            backend = make_backend(target)
            binder = create_function_from_signature(fn.signature, fn.params, backend)
            kwargs = {a["name"]: _argument(a) for a in request["args"]}
            for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
                if request.get(option) is not None:
                    kwargs[option] = request[option]
            bound, specialization, options = binder(**kwargs)
            # Triton's own packing of signature/constexprs/attributes (JITFunction._pack_args)
            options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
            usage.signature = {k: str(v) for k, v in signature.items()}
            log = io.StringIO()
            saved = (knobs.compilation.always_compile, knobs.nvidia.dump_ptxas_log)
            knobs.compilation.always_compile = True  # a cached cubin would skip ptxas and its -v log
            knobs.nvidia.dump_ptxas_log = True
            try:
                with contextlib.redirect_stdout(log):
                    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
            finally:
                knobs.compilation.always_compile, knobs.nvidia.dump_ptxas_log = saved
            ptxas_log = log.getvalue()
            parsed = parse_ptxas_log(ptxas_log)
            if "registers" not in parsed:
                raise RuntimeError(f"no register count in Triton's ptxas log: {ptxas_log[-500:]!r}")
            usage.registers = parsed["registers"]
            usage.spill_stores = parsed.get("spill_stores")
            usage.spill_loads = parsed.get("spill_loads")
            usage.stack_frame = parsed.get("stack_frame")
            usage.shared_static = parsed["shared_static"]
            usage.shared_dynamic = int(kernel.metadata.shared)
            usage.shared_per_block = usage.shared_static + usage.shared_dynamic
            usage.num_warps = int(kernel.metadata.num_warps)
            usage.num_stages = int(kernel.metadata.num_stages)
            ptxas = nvidia.get_ptxas(cc).path
            usage.ptxas = _tool_version(ptxas)
            usage.cubin = _cubin_resources(kernel.asm["cubin"], request["kernel_name"], Path(ptxas).parent / "cuobjdump", Path(workdir))
            if request.get("sass_mix") or request.get("sass_loops"):
                text = cubin_sass_text(kernel.asm["cubin"], Path(ptxas).parent / "cuobjdump", Path(workdir))
                sass_mix = sass_mix_of(text)
                sass_loops = sass_loops_of(text)
            if "STACK" in usage.cubin:
                usage.triton_n_spills = usage.cubin["STACK"] // 4
            if usage.cubin.get("REG") not in (None, usage.registers):
                raise RuntimeError(f"ptxas log says {usage.registers} registers, the cubin {usage.cubin['REG']}")
            usage.ok = True
        except Exception as exc:  # whatever Triton raises compiling the kernel is this result's error, reported as such
            usage.error = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
    usage.compile_seconds = round(time.perf_counter() - started, 3)
    out = usage.to_dict()
    if request.get("sass_mix"):  # asked for only: every other caller's result keeps its keys
        out["sass_mix"] = sass_mix if usage.ok else {}
    if request.get("sass_loops"):  # likewise
        out["sass_loops"] = sass_loops if usage.ok else []
    return out


def _tool_version(path: str) -> str:
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return Path(path).name
    match = re.search(r"release ([\d.]+), (V[\d.]+)", text)
    return f"{Path(path).name} {match.group(2)}" if match else Path(path).name


def _cubin_resources(cubin: bytes, kernel_name: str, cuobjdump: Path, workdir: Path) -> dict:
    if not cuobjdump.exists():
        return {}
    path = workdir / "kernel.cubin"
    path.write_bytes(cubin)
    try:
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_cuobjdump(out, kernel_name)


_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def cubin_sass_text(cubin: bytes, cuobjdump: Path, workdir: Path) -> str:
    """The cubin's SASS (cuobjdump -sass); empty where cuobjdump is missing or fails."""
    if not cuobjdump.exists():
        return ""
    path = workdir / "kernel_sass.cubin"
    path.write_bytes(cubin)
    try:
        return subprocess.run([str(cuobjdump), "-sass", str(path)], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def sass_mix_of(text: str) -> dict[str, int]:
    """Instructions of SASS text by opcode (the opcode without its modifiers, a predicate guard dropped)."""
    mix: dict[str, int] = {}
    for line in text.splitlines():
        if m := _SASS_LINE.match(line):
            mix[m.group(1)] = mix.get(m.group(1), 0) + 1
    return dict(sorted(mix.items()))


def cubin_sass_mix(cubin: bytes, cuobjdump: Path, workdir: Path) -> dict[str, int]:
    """Instructions of the cubin's SASS by opcode (cuobjdump -sass; the opcode without its modifiers, a
    predicate guard dropped): HMMA is mma.sync, HGMMA wgmma, LDL/STL local memory."""
    return sass_mix_of(cubin_sass_text(cubin, cuobjdump, workdir))


_SASS_ADDR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")  # (some cuobjdumps print scheduling hints after it)


def sass_loops_of(text: str) -> list[dict]:
    """The loops of SASS text: every backward branch closes one, from its target to the branch. Each with its
    first and last address, its instruction count and its opcode mix (an inner loop's body counted once, in
    the outer loop's mix too); innermost (shortest) first. (A branch to itself, the trap after EXIT, is none.)"""
    ins = [(int(m.group(1), 16), m.group(2).strip()) for line in text.splitlines() if (m := _SASS_ADDR.match(line))]
    loops = []
    for addr, body in ins:
        target = _BRANCH_TARGET.search(body)
        if target and int(target.group(1), 16) < addr:
            start = int(target.group(1), 16)
            lines = [f"/*{a:04x}*/ {t};" for a, t in ins if start <= a <= addr]
            loops.append({"start": hex(start), "end": hex(addr), "instructions": len(lines),
                          "mix": sass_mix_of("\n".join(lines))})  # fmt: skip
    return sorted(loops, key=lambda loop: loop["instructions"])


def compile_resources(request: dict, python: str | None = None, timeout: float = 600) -> dict:
    """Compile in this process, or with interpreter ``python`` (a subprocess of this module)."""
    if python is None:
        return compile_in_process(request)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run(
            [python, "-m", "tools.kernel_source.resources"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd=root,
            env=env,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ResourceUsage(arch=request["arch"], ok=False, error=f"{python}: {type(exc).__name__}: {exc}").to_dict()
    if done.returncode != 0:
        return ResourceUsage(arch=request["arch"], ok=False, error=f"{python} exited {done.returncode}: {done.stderr.strip()[-1500:]}").to_dict()
    return json.loads(done.stdout)


def main() -> int:
    request = json.loads(sys.stdin.read())
    print(json.dumps(compile_in_process(request), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
