"""Capability gates of an engine's source tree, found statically.

    scan(source_root) -> GateScan            every gate, helper, constant, probe, env switch
    evaluate(scan, sm, env=None) -> [GateRow] the gate table for one compute capability
    fallbacks_for_kernels(scan, sm, names)   profiled kernels tied to the gates that reach them

`python -m tools.gates --source DIR --sm N [--kernels NAME ...]` prints the box-side JSON;
`tools.gates.cli` is the human-facing table (`python -m agent gates`). See docs/gates.md.
"""

from .fallbacks import KernelTie, TieGate, TiePath, fallbacks_for_kernels
from .model import (
    SM_VERSIONS,
    BranchPath,
    Constant,
    EnvSwitch,
    EnvUse,
    Gate,
    GateRow,
    GateScan,
    Helper,
    HelperUse,
    ImportProbe,
    Unresolved,
    from_dict,
)
from .scan import scan
from .source import SourceMissing, default_source
from .table import evaluate

__all__ = [
    "SM_VERSIONS",
    "BranchPath",
    "Constant",
    "EnvSwitch",
    "EnvUse",
    "Gate",
    "GateRow",
    "GateScan",
    "Helper",
    "HelperUse",
    "ImportProbe",
    "KernelTie",
    "SourceMissing",
    "TieGate",
    "TiePath",
    "Unresolved",
    "default_source",
    "evaluate",
    "fallbacks_for_kernels",
    "from_dict",
    "scan",
]
