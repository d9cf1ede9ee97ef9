"""Triton's Gluon dialect as the Hopper kernels (``sm90``, ``sm90_ws``) use it, or ``gluon = None``.

Gluon is Triton's explicit-layout dialect, the one the Hopper (wgmma) kernels of the large regime are
written in. Its names are bound once here, under their Triton 3.6 names (the H200 image) or their later
ones, so the kernels read the same on both. Where this Triton has no Gluon, ``gluon`` is None, the Hopper
kernels are not defined, and ``tiles.choose_config`` never picks them.
"""

from __future__ import annotations

try:  # Gluon, Triton's explicit-layout dialect: the Hopper (wgmma) kernel of the large regime
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy as _gl_async_copy,
        fence_async_shared as _gl_fence_async_shared,
        mbarrier as _gl_mbarrier,
        warpgroup_mma as _gl_wgmma,
        warpgroup_mma_wait as _gl_wgmma_wait,
    )

    # Triton 3.6 names (the H200 image) and their later ones (3.9 renamed both).
    _gl_cp_async = getattr(_gl_async_copy, "async_load", None) or _gl_async_copy.async_copy_global_to_shared
    _gl_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
except (ImportError, AttributeError):  # a Triton without Gluon: the Triton-language kernels only
    gluon = None
