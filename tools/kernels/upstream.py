"""The upstream SGLang sm_120 Triton sparse decode, loaded from the installed sglang package's own file.

Only that one file is executed (it imports torch and triton alone), so sglang's GPU stack need not
be importable. Under the Triton CPU interpreter the autotuner cannot benchmark, so one of the
kernel's own configs is pinned there.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SGLANG_VERSION = "0.5.23"
KERNEL_FILE = Path("kernels/ops/attention/flash_mla_sm120_triton.py")
KERNEL_NAME = "_tiled_sparse_decode_kernel"
_MODULE_NAME = "_perf_investigator_upstream_sm120_triton"
SGLANG_MODULE = "sglang.kernels.ops.attention.flash_mla_sm120_triton"


class SglangMissing(RuntimeError):
    """The sglang package, or the kernel file in it, is not installed where we look."""


def sglang_root() -> Path:
    """Directory of the installed sglang package, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SglangMissing(
            f"sglang is not installed: pip install --no-deps sglang=={SGLANG_VERSION} brings its source"
        )
    return Path(list(spec.submodule_search_locations)[0])


def sglang_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def kernel_path() -> Path:
    path = sglang_root() / KERNEL_FILE
    if not path.is_file():
        raise SglangMissing(f"{path} not found: this sglang ({sglang_version()}) lacks the sm_120 Triton decode")
    return path


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def load(pin_config: int | None = None) -> ModuleType:
    """The upstream kernel module: SGLang's own when this process has imported it, else imported from its file
    (once per process) without the rest of sglang.

    ``pin_config`` keeps only that index of the autotuner's configs; under the interpreter, config 0
    is pinned when none is given, since the autotuner's benchmark needs a GPU.
    """
    # SGLang's own module where this process has imported it (a process that loaded SGLang's plugins, as
    # SGLang's scheduler processes and the stand-in's ranks do: a hook a plugin applied, such as
    # tools/engines/sglang/splitk_plugin.py's, is then what is called, as in SGLang); a private copy else.
    module = sys.modules.get(SGLANG_MODULE) or sys.modules.get(_MODULE_NAME)
    if module is None:
        path = kernel_path()
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE_NAME] = module
        spec.loader.exec_module(module)
    if pin_config is None and interpreter_active():
        pin_config = 0
    if pin_config is not None:
        tuner = getattr(module, KERNEL_NAME)
        all_configs = getattr(tuner, "_all_configs", None) or list(tuner.configs)
        tuner._all_configs = all_configs
        tuner.configs = [all_configs[pin_config]]
    return module


def autotune_configs() -> list[dict]:
    """The kernel's autotune configs as plain dicts (BLOCK_T, num_warps, num_stages)."""
    tuner = getattr(load(), KERNEL_NAME)
    configs = getattr(tuner, "_all_configs", None) or tuner.configs
    return [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages) for c in configs]


def chosen_config() -> dict | None:
    """The config the autotuner settled on in this process, if it has run."""
    tuner = getattr(load(), KERNEL_NAME)
    best = getattr(tuner, "best_config", None)
    if best is None:
        return None
    return dict(best.kwargs, num_warps=best.num_warps, num_stages=best.num_stages)
