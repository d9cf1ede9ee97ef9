"""Kernel source analysis: find a kernel, evaluate its launch grid at given shapes, the loops each
program runs, and its registers/spills/shared memory and occupancy for a GPU architecture.

Runs on the CPU; the ahead-of-time compile needs Triton (no GPU).
"""

from .analysis import KernelNotFound, analyze
from .grid_report import ConfigReport, GridReport
from .launches import LaunchSite, find_launch_sites
from .locate import KernelDef, find_kernel_definitions
from .loops import LoopInfo
from .occupancy import ARCHS, ArchLimits, Occupancy, arch_limits, occupancy, waves
from .padding import padded_programs
from .resources import ResourceUsage, compile_resources

__all__ = [
    "ARCHS",
    "ArchLimits",
    "ConfigReport",
    "GridReport",
    "KernelDef",
    "KernelNotFound",
    "LaunchSite",
    "LoopInfo",
    "Occupancy",
    "ResourceUsage",
    "analyze",
    "arch_limits",
    "compile_resources",
    "find_kernel_definitions",
    "find_launch_sites",
    "occupancy",
    "padded_programs",
    "waves",
]
