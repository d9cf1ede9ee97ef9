import functools

import torch


def _arch_check(majors, min_cuda):
    if not torch.cuda.is_available():
        return False
    major, _ = torch.cuda.get_device_capability()
    cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    return major in majors and cuda >= min_cuda


is_hopper_ok = functools.lru_cache(maxsize=None)(functools.partial(_arch_check, majors=(9,), min_cuda=(12, 0)))


def arch_is_blackwell_dc():
    major, minor = torch.cuda.get_device_capability()
    return major == 10


def device_sm():
    props = torch.cuda.get_device_properties(0)
    return props.major * 10 + props.minor


def supports_fast_fp4():
    sm = device_sm()
    return 100 <= sm < 110


def turbo_ok():
    cap = torch.cuda.get_device_capability()
    return cap >= (8, 9)


_FACTS = {
    "is_dc_blackwell": "arch_is_blackwell_dc",
    "is_hopper": "is_hopper_ok",
}


class Facts:
    def __init__(self):
        object.__setattr__(self, "_pinned", {})

    def __getattr__(self, name):
        probe = _FACTS.get(name)
        if probe is None:
            raise AttributeError(name)
        pinned = object.__getattribute__(self, "_pinned")
        if name in pinned:
            return pinned[name]
        from fakeengine import platform_utils as _pu

        return getattr(_pu, probe)()


_THE_FACTS = Facts()


def facts():
    return _THE_FACTS


class Device:
    @property
    def has_tma(self):
        return turbo_ok() and device_sm() >= 90
