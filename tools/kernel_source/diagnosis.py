"""What a Triton kernel's programs load and how they multiply, read from its source at given shapes.

An abstract run of the kernel body and of the ``@triton.jit`` helpers it calls (abstract_run.py), in
which every value is known only by its block *shape*, the grid axes (``tl.program_id(i)``) and loop
variables it depends on, and its value where that is a known scalar. A loaded value depends on what its address
depends on, so ``indices`` loaded per batch row and then used to address the KV cache carry the
batch axis into the cache's addresses. From that, per ``tl.load``/``tl.store``:

* bytes per program: lanes of the pointer block x element size x trips of the loops around it;
* bytes all programs load: that x the programs of the grid;
* unique bytes: a load whose address does not depend on a grid axis (or an enclosing loop) reads the
  same bytes in every program along it (every iteration of it), so that axis (loop) counts once;
* the redundancy factor: loaded / unique.

Inner products: ``tl.dot`` (tensor cores) against ``tl.sum`` of an elementwise product of two blocks
(CUDA-core multiply-reduce), with their lines and multiply-accumulate counts.

What this rests on (listed in ``assumptions``): masks are not modelled (a masked-off lane is counted
as loaded, an upper bound); rows gathered through loaded indices are taken as distinct (top-k
indices of one row are); loop trip counts are those of the first program (``tl.program_id`` 0), so
a split loop's share is assumed equal across programs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .abstract_run import Access, AbstractRun, initial_env
from .blocks import Frame
from .scope import Scope

ELEMENT_BYTES = {
    "bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
}


@dataclass
class ConfigDiagnosis:
    """One config's accesses and inner products, with the byte totals at its grid."""

    label: str
    grid: list | None
    programs: int | None
    accesses: list[dict] = field(default_factory=list)
    inner_products: list[dict] = field(default_factory=list)
    loaded_bytes: int | None = None
    unique_bytes: int | None = None
    redundancy_factor: float | None = None
    gathered_bytes: int | None = None  # loads addressed through loaded data (KV rows through top-k indices)
    unique_gathered_bytes: int | None = None
    gather_redundancy_factor: float | None = None
    scratch_bytes: int | None = None  # loads of what the kernel itself stores (a scratch round trip): not input
    stored_bytes: int | None = None
    unique_stored_bytes: int | None = None
    cuda_core_macs: int | None = None
    tensor_core_macs: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _access_dict(access: Access, grid: list | None, loop_trips: dict[int, int | None]) -> dict:
    axes = sorted(t[1] for t in access.deps if t[0] == "pid")
    loop_deps = {t[1] for t in access.deps if t[0] == "loop"}
    element = ELEMENT_BYTES.get(access.pointer_dtype or "")
    lanes = math.prod(access.shape) if access.shape is not None and all(isinstance(d, int) for d in access.shape) else None
    per_trip = lanes * element if lanes is not None and element is not None else None
    per_program = per_trip * access.trips if per_trip is not None and access.trips is not None else None
    programs = math.prod(grid) if grid and all(isinstance(d, int) for d in grid) else None
    total = per_program * programs if per_program is not None and programs is not None else None
    unique = None
    if per_trip is not None and grid and all(isinstance(d, int) for d in grid):
        # trips of the loops the address varies with, times the programs along the axes it varies with
        trips_dependent = _dependent_trips(access, loop_deps, loop_trips)
        if trips_dependent is not None:
            unique = per_trip * trips_dependent * math.prod(grid[a] for a in axes if 0 <= a < len(grid))
    independent = [a for a in range(len(grid or [])) if a not in axes]
    return {
        "op": access.op, "line": access.line, "function": access.function, "text": access.text, "tensor": sorted(access.bases),
        "dtype": access.pointer_dtype, "element_bytes": element, "shape": list(access.shape) if access.shape is not None else None,
        "trips": access.trips, "loops": access.loops, "grid_axes": axes,
        "independent_axes": independent, "data_dependent": ("data",) in access.deps,
        "bytes_per_program": per_program, "bytes": total, "unique_bytes": unique,
        "redundancy": total / unique if total is not None and unique else None,
        "conditional": access.conditional,
    }


def _dependent_trips(access: Access, loop_deps: set, loop_trips: dict[int, int | None]) -> int | None:
    """Trips of only the enclosing loops the address depends on (each loop's own count)."""
    product = 1
    for line in access.loops:
        if line in loop_deps:
            count = loop_trips.get(line)
            if count is None:
                return None
            product *= count
    return product


def diagnose_config(kdef, module: Scope, values: dict[str, Any], grid: tuple | None, trip_counts: dict[int, int | None], label: str,
                    dtypes: dict[str, str] | None = None) -> ConfigDiagnosis:
    """The accesses and inner products of one config (its kernel argument ``values`` and ``grid``);
    ``dtypes`` names the element dtype of pointer arguments the launch does not show."""
    dims = [d if isinstance(d, int) and not isinstance(d, bool) else None for d in grid] if isinstance(grid, tuple) else None
    interpreter = AbstractRun(kdef.tree, kdef.source, module, trip_counts, tuple(dims) if dims else None)
    env = initial_env(kdef.node, values, dtypes or {})
    interpreter.block(kdef.node.body, env, Frame(kdef.name, 1, [], None, True))
    accesses = [_access_dict(a, dims, interpreter.loop_trips) for a in interpreter.accesses]
    programs = math.prod(dims) if dims and all(d is not None for d in dims) else None
    result = ConfigDiagnosis(label=label, grid=dims, programs=programs, accesses=accesses, notes=list(interpreter.notes))
    stores = [a for a in accesses if a["op"] != "load"]
    stored_tensors = {t for a in stores for t in a["tensor"]}
    for access in accesses:
        access["scratch"] = access["op"] == "load" and bool(set(access["tensor"]) & stored_tensors)
    loads = [a for a in accesses if a["op"] == "load" and not a["scratch"]]
    result.scratch_bytes = _total([a for a in accesses if a.get("scratch")], "bytes", empty=0)
    result.loaded_bytes = _total(loads, "bytes")
    result.unique_bytes = _total(loads, "unique_bytes")
    gathers = [a for a in loads if a["data_dependent"]]
    result.gathered_bytes = _total(gathers, "bytes")
    result.unique_gathered_bytes = _total(gathers, "unique_bytes")
    if result.gathered_bytes is not None and result.unique_gathered_bytes:
        result.gather_redundancy_factor = result.gathered_bytes / result.unique_gathered_bytes
    result.stored_bytes = _total(stores, "bytes")
    result.unique_stored_bytes = _total(stores, "unique_bytes")
    if result.loaded_bytes is not None and result.unique_bytes:
        result.redundancy_factor = result.loaded_bytes / result.unique_bytes
    for product in interpreter.products:
        entry = dict(product.__dict__)
        entry["unit"] = "tensor cores" if product.kind == "dot" else "CUDA cores"
        entry["macs_all_programs"] = product.macs * programs if product.macs is not None and programs is not None else None
        result.inner_products.append(entry)
    result.tensor_core_macs = _total([p for p in result.inner_products if p["kind"] == "dot"], "macs_all_programs", empty=0)
    result.cuda_core_macs = _total([p for p in result.inner_products if p["kind"] == "multiply-reduce"], "macs_all_programs", empty=0)
    return result


def _total(items: list[dict], key: str, empty: int | None = None) -> int | None:
    if not items:
        return empty
    values = [i[key] for i in items]
    return sum(values) if all(v is not None for v in values) else None


def inner_product_kind(products: list[dict]) -> str:
    """"tensor-core dot", "CUDA-core multiply-reduce", "mixed" (both) or "none"."""
    kinds = {p["kind"] for p in products}
    if kinds == {"dot"}:
        return "tensor-core dot"
    if kinds == {"multiply-reduce"}:
        return "CUDA-core multiply-reduce"
    return "mixed" if kinds else "none"


ASSUMPTIONS = [
    "bytes per access = lanes of the pointer block x element size x trips of the enclosing loops; masks are not "
    "modelled, so masked-off lanes count as loaded (an upper bound)",
    "unique bytes count an access once along each grid axis and loop its address does not depend on; rows gathered "
    "through loaded indices are taken as distinct, and so are the rows of different programs along the axes it does depend on",
    "trip counts are those of the first program (program_id 0): a loop split across programs is assumed to split evenly",
    "loads from a tensor the kernel also stores to (its own scratch) are counted apart (scratch_bytes), not as input",
]


def diagnose(kdef, module: Scope, config_args: dict[str, dict], grids: dict[str, Any], loops: list, chosen_label: str | None,
             padding: dict | None = None, dtypes: dict[str, str] | None = None) -> dict:
    """The diagnosis the grid tool reports: per config (``configs``), and for the chosen config (else the
    first) the headline figures: ``loaded_bytes``, ``unique_bytes``, ``redundancy_factor``,
    ``inner_product`` ("tensor-core dot" / "CUDA-core multiply-reduce" / "mixed" / "none"), the lines of
    each inner product, ``padding`` (from ``padded_programs`` when the real head count was given) and
    ``assumptions``. Loop trip counts come from the loop analysis (by line, per config)."""
    configs = []
    for label, values in config_args.items():
        trips = {loop.line: loop.trip_counts.get(label) for loop in loops}
        configs.append(diagnose_config(kdef, module, values, grids.get(label), trips, label, dtypes))
    focus = next((c for c in configs if c.label == chosen_label), configs[0] if configs else None)
    if focus is None:
        return {"ok": False, "error": "no config to diagnose", "configs": []}
    products = focus.inner_products
    return {
        "ok": True,
        "config": focus.label,
        "grid": focus.grid,
        "programs": focus.programs,
        "loaded_bytes": focus.loaded_bytes,
        "unique_bytes": focus.unique_bytes,
        "redundancy_factor": focus.redundancy_factor,
        "gathered_bytes": focus.gathered_bytes,
        "unique_gathered_bytes": focus.unique_gathered_bytes,
        "gather_redundancy_factor": focus.gather_redundancy_factor,
        "gather_lines": sorted({a["line"] for a in focus.accesses if a["op"] == "load" and a["data_dependent"] and not a["scratch"]}),
        "independent_axes_of_gathers": sorted({x for a in focus.accesses if a["op"] == "load" and a["data_dependent"] and not a["scratch"] for x in a["independent_axes"]}),
        "scratch_bytes": focus.scratch_bytes,
        "stored_bytes": focus.stored_bytes,
        "inner_product": inner_product_kind(products),
        "dot_lines": sorted({p["line"] for p in products if p["kind"] == "dot"}),
        "multiply_reduce_lines": sorted({p["line"] for p in products if p["kind"] == "multiply-reduce"}),
        "cuda_core_macs": focus.cuda_core_macs,
        "tensor_core_macs": focus.tensor_core_macs,
        "padding": padding,
        "assumptions": list(ASSUMPTIONS),
        "configs": [c.to_dict() for c in configs],
    }


__all__ = ["ASSUMPTIONS", "ConfigDiagnosis", "diagnose", "diagnose_config", "inner_product_kind"]
