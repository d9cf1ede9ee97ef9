"""Theoretical occupancy and waves from an architecture's per-SM limits.

Limits per compute capability are those of NVIDIA's CUDA C++ Programming Guide, "Technical
Specifications per Compute Capability", as encoded in NVIDIA CCCL's
``libcudacxx/include/cuda/__device/arch_traits.h`` (``arch_traits<arch_id::sm_90>``, ``<sm_120>``):

=====  ==========  =========  =========  =============  ============  ===============
arch   threads/SM  warps/SM   blocks/SM  regs/SM        smem/SM       reserved/block
=====  ==========  =========  =========  =============  ============  ===============
sm_80  2048        64         32         65536          164 KiB       1 KiB
sm_86  1536        48         16         65536          100 KiB       1 KiB
sm_89  1536        48         24         65536          100 KiB       1 KiB
sm_90  2048        64         32         65536          228 KiB       1 KiB
sm_100 2048        64         32         65536          228 KiB       1 KiB
sm_120 1536        48         24         65536          100 KiB       1 KiB
=====  ==========  =========  =========  =============  ============  ===============

The block count per SM follows the CUDA occupancy calculator (``cuda_occupancy.h``, shipped in
the Triton wheel under ``triton/backends/nvidia/include``): registers are allocated per warp in
units of 256 and split over 4 sub-partitions; shared memory per block is rounded up to 128 bytes
and includes the 1 KiB the driver reserves per block. The shared-memory limit assumes the largest
carveout (the driver picks the carveout; Nsight Compute reports the one it chose).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

REG_ALLOC_UNIT = 256  # registers, per warp (cudaOccRegAllocationGranularity, cc >= 3)
SUB_PARTITIONS = 4  # cudaOccSubPartitionsPerMultiprocessor, cc >= 7
SMEM_ALLOC_UNIT = 128  # bytes (cudaOccSMemAllocationGranularity, cc >= 8)
MAX_REGS_PER_THREAD = 255  # what ptxas can assign


@dataclass(frozen=True)
class ArchLimits:
    arch: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    smem_per_sm: int
    smem_per_block_optin: int
    reserved_smem_per_block: int
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def to_dict(self) -> dict:
        return dict(asdict(self), max_warps_per_sm=self.max_warps_per_sm)


def _limits(arch: str, threads: int, blocks: int, smem_kib: int) -> ArchLimits:
    reserved = 1024
    return ArchLimits(
        arch=arch,
        max_threads_per_sm=threads,
        max_blocks_per_sm=blocks,
        regs_per_sm=65536,
        regs_per_block=65536,
        smem_per_sm=smem_kib * 1024,
        smem_per_block_optin=smem_kib * 1024 - reserved,
        reserved_smem_per_block=reserved,
    )


ARCHS: dict[str, ArchLimits] = {
    "sm_80": _limits("sm_80", 2048, 32, 164),
    "sm_86": _limits("sm_86", 1536, 16, 100),
    "sm_89": _limits("sm_89", 1536, 24, 100),
    "sm_90": _limits("sm_90", 2048, 32, 228),
    "sm_100": _limits("sm_100", 2048, 32, 228),
    "sm_120": _limits("sm_120", 1536, 24, 100),
}


def arch_limits(arch: str) -> ArchLimits:
    """Limits for ``sm_90``/``90``/``sm_90a``/``9.0`` style names; ValueError for an unknown arch."""
    key = normalize_arch(arch)
    if key not in ARCHS:
        raise ValueError(f"no per-SM limits recorded for {arch!r} (known: {', '.join(sorted(ARCHS))})")
    return ARCHS[key]


def normalize_arch(arch: str) -> str:
    text = str(arch).strip().lower().removeprefix("sm_").removeprefix("sm").rstrip("af")
    if "." in text:
        major, minor = text.split(".", 1)
        text = f"{major}{minor}"
    if not text.isdigit():
        raise ValueError(f"cannot read an architecture from {arch!r}")
    return f"sm_{int(text)}"


def capability(arch: str) -> int:
    return int(normalize_arch(arch).removeprefix("sm_"))


@dataclass(frozen=True)
class Occupancy:
    arch: str
    threads_per_block: int
    regs_per_thread: int
    smem_per_block: int  # bytes the kernel asks for (static + dynamic)
    blocks_per_sm: int
    limited_by: list[str]
    block_limits: dict[str, int]  # blocks per SM each resource allows
    active_warps_per_sm: int
    max_warps_per_sm: int
    occupancy: float  # active warps / max warps

    def to_dict(self) -> dict:
        return asdict(self)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(arch: str, threads_per_block: int, regs_per_thread: int, smem_per_block: int = 0, smem_carveout: int | None = None) -> Occupancy:
    """Theoretical blocks per SM and occupancy of a kernel on ``arch``.

    ``smem_per_block`` is the kernel's static plus dynamic shared memory; ``smem_carveout`` the
    shared memory the SM is configured with (Nsight Compute's "Shared Memory Configuration Size"),
    by default the largest the architecture allows.
    """
    limits = arch_limits(arch)
    warps = -(-threads_per_block // limits.warp_size)
    by_warps = limits.max_warps_per_sm // warps if threads_per_block <= 1024 else 0

    regs_per_warp = _round_up(regs_per_thread * limits.warp_size, REG_ALLOC_UNIT)
    regs_checked_per_block = regs_per_warp * _round_up(warps, SUB_PARTITIONS)
    if regs_per_thread > MAX_REGS_PER_THREAD or regs_checked_per_block > limits.regs_per_block or regs_per_warp * warps > limits.regs_per_block:
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = limits.max_blocks_per_sm
    else:
        warps_per_partition = (limits.regs_per_sm // SUB_PARTITIONS) // regs_per_warp
        by_regs = (warps_per_partition * SUB_PARTITIONS) // warps

    smem_allocated = _round_up(smem_per_block + limits.reserved_smem_per_block, SMEM_ALLOC_UNIT)
    if smem_per_block > limits.smem_per_block_optin:
        by_smem = 0
    else:
        carveout = limits.smem_per_sm if smem_carveout is None else max(smem_carveout, smem_allocated)
        by_smem = carveout // smem_allocated

    block_limits = {"warps": by_warps, "registers": by_regs, "shared_memory": by_smem, "blocks": limits.max_blocks_per_sm}
    blocks = min(block_limits.values())
    limited_by = sorted(k for k, v in block_limits.items() if v == blocks)
    active = blocks * warps
    return Occupancy(
        arch=limits.arch,
        threads_per_block=threads_per_block,
        regs_per_thread=regs_per_thread,
        smem_per_block=smem_per_block,
        blocks_per_sm=blocks,
        limited_by=limited_by,
        block_limits=block_limits,
        active_warps_per_sm=active,
        max_warps_per_sm=limits.max_warps_per_sm,
        occupancy=active / limits.max_warps_per_sm,
    )


def waves(programs: int, sms: int, blocks_per_sm: int) -> float | None:
    """Waves per SM as Nsight Compute defines it: programs / (SMs x blocks per SM)."""
    if blocks_per_sm <= 0 or sms <= 0:
        return None
    return programs / (sms * blocks_per_sm)
