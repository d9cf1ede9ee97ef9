import os

import torch
from external_arch_pkg import is_sm130_supported

from fakeengine.envs import env
from fakeengine.platform_utils import Device, arch_is_blackwell_dc, device_sm, facts, turbo_ok
from fakeengine.platform_utils import is_hopper_ok as _hop
from fakeengine.utils import supports_fast_fp4

try:
    import fast_fp4_lib

    HAS_FP4 = True
except ImportError:
    HAS_FP4 = False

_DC = arch_is_blackwell_dc()
_BACKEND = env.FAKE_DECODE_BACKEND.get()

if turbo_ok():
    os.environ["FAKE_TURBO_MODE"] = "1"


def quantize(x):
    if supports_fast_fp4():
        return fp4_quant(x)
    return fp8_quant(x)


def gemm(a, b):
    if _hop():
        return hopper_gemm(a, b)
    return generic_gemm(a, b)


def moe(x):
    if _DC:
        return dc_moe(x)
    return generic_moe(x)


def norm(x):
    blackwell = facts().is_dc_blackwell
    if blackwell:
        return dc_norm(x)
    return generic_norm(x)


def rope(x):
    if facts().is_hopper:
        return hopper_rope(x)
    return generic_rope(x)


def copy(x):
    if Device().has_tma:
        return tma_copy(x)
    return x.clone()


def fp4_path(x):
    if HAS_FP4 and supports_fast_fp4():
        return fast_fp4_lib.run(x)
    return x


def consumer_path(x):
    if os.environ.get("FAKE_SM120_PATH", "0") == "1" and device_sm() == 120:
        return consumer_kernel(x)
    return x


def capability_path(x):
    if torch.cuda.get_device_capability() >= (9, 0):
        return wgmma_path(x)
    return x


def future_path(x):
    if is_sm130_supported():
        return future_kernel(x)
    return x


def caps_path(self, x):
    if self.device_caps.is_sm200:
        return next_gen(x)
    return x


def decode(q):
    if arch_is_blackwell_dc():
        from dcblas import dc_decode

        return dc_decode(q)
    if _BACKEND == "slow":
        from fakeengine.kernels.decode import slow_decode

        return slow_decode(q)
    from fakeengine.kernels.decode import reference_decode

    return reference_decode(q)


def fp4_switch(x):
    if env.FAKE_USE_FP4.get() and supports_fast_fp4():
        return fp4_quant(x)
    return x


# Early exits: the side a true test takes leaves the function, so the SMs that take it are shut
# out and the others go on to the code below (sglang's `if capability[0] != 12: return None`).
import logging

logger = logging.getLogger(__name__)


def consumer_gemv(x):
    capability = torch.cuda.get_device_capability()
    if capability[0] != 12:
        return None
    return consumer_gemv_kernel(x)


def dc_only(x):
    if not arch_is_blackwell_dc():
        raise RuntimeError("dc_only needs a data-centre Blackwell GPU")
    return dc_kernel(x)


def per_layer(layers):
    for layer in layers:
        if device_sm() < 90:
            continue
        layer.use_wgmma()


def not_on_hopper(x):
    if _hop():
        logger.warning("not_on_hopper: skipped on Hopper")
        return
    return generic_kernel(x)


def hopper_name():
    # returning a chosen value is a selection, not an exit
    if _hop():
        return "hopper"
    return "generic"


def jit_target():
    # the rebinding inside the branch comes after the test and must not reach it
    major, minor = torch.cuda.get_device_capability()
    suffix = "a"
    if (major, minor) == (10, 7):
        major, minor, suffix = 10, 0, "f"
    return major, minor, suffix


def retry_sm(x):
    # inside a loop a later binding does reach the test on the next iteration
    sm = 0
    for _ in range(2):
        if sm == 90:
            return hopper_gemm(x, x)
        sm = device_sm()
    return x
