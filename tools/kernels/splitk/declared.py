"""The declared hardware's plan on a stand-in box: which environment makes the split-K wrapper plan, and
Triton compile, as the deployment's GPU would. No torch here: the agent reads it to set an engine's
environment, the kernel CLI to set its own.

- ``PLAN_ARCH_ENV`` (a compute capability, 120): the wrapper picks the tile configs and kernels of that
  architecture's plan (``tiles.plan_arch``) on whatever device it runs; on the CPU the interpreter then
  runs the declared hardware's Triton-language kernels.
- ``WGMMA_OFF_ENV`` (Triton's ``DISABLE_MMA_V3=1``): on a Hopper box, Triton lowers ``tl.dot`` to the
  mma.sync that sm_120 has instead of Hopper's wgmma, which sm_120 lacks. Triton reads it when it
  compiles and keys its on-disk cache by it, not its in-process one: it must be set before the process
  compiles its first kernel (an engine process, or the CLI before it builds anything).
"""

from __future__ import annotations

from typing import Optional

PLAN_ARCH_ENV = "PERF_INVESTIGATOR_SPLITK_ARCH"
WGMMA_OFF_ENV = "DISABLE_MMA_V3"
HOPPER = 90  # the one architecture with wgmma among those the plan knows


def plan_env(declared: Optional[int], box: Optional[int]) -> dict[str, str]:
    """The environment for the declared architecture ``declared`` on a box of architecture ``box`` (None:
    no GPU): nothing where they are one architecture or nothing is declared; the plan's architecture
    otherwise, and on a Hopper box whose declared GPU has no wgmma, the dots lowered without it."""
    if declared is None or declared == box:
        return {}
    if declared == HOPPER:
        raise ValueError("Hopper's plan runs on a Hopper GPU only: its kernels are wgmma and Gluon")
    env = {PLAN_ARCH_ENV: str(declared)}
    if box == HOPPER:
        env[WGMMA_OFF_ENV] = "1"
    return env
