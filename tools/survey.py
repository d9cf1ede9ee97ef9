"""Box-side survey: ``python -m tools.survey`` prints one JSON object describing the machine.

GPUs (name, SM count, compute capability, memory), driver, CPU and memory, and the versions of the
software the investigation uses (torch, triton, sglang and where its source lies, flash_mla), and the
copy bandwidth and matmul rate the box reaches (``tools.rates``: the denominators of kernel floors;
a few seconds on a CPU). Nothing here needs a GPU or torch: what is missing is reported as missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

from tools import rates


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # an import hook that refuses the package: as good as absent
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"available": False}
    query = "name,driver_version,memory.total,clocks.max.sm,clocks.max.mem"
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "error": str(exc)}
    rows = [dict(zip(query.split(","), (v.strip() for v in line.split(",")))) for line in out.stdout.splitlines() if line]
    return {"available": out.returncode == 0, "gpus": rows}


def _gpus() -> tuple[list[dict], str | None]:
    if importlib.util.find_spec("torch") is None:
        return [], "torch is not installed on the box"
    import torch

    if not torch.cuda.is_available():
        return [], None
    gpus = []
    for index in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(index)
        gpus.append({
            "index": index, "name": p.name, "sm_count": p.multi_processor_count,
            "capability": p.major * 10 + p.minor, "memory_gib": round(p.total_memory / 2**30, 1),
            "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        })
    return gpus, None


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        return None
    return None


def survey() -> dict:
    gpus, gpu_note = _gpus()
    sglang_dir = _package_dir("sglang")
    return {
        "host": {"name": platform.node(), "platform": platform.platform(), "machine": platform.machine(),
                 "cpus": os.cpu_count(),
                 "memory_gib": _memory_gib(), "python": sys.version.split()[0]},
        "gpus": gpus,
        "gpu_note": gpu_note,
        "nvidia_smi": _nvidia_smi(),
        "rates": rates.measure(),
        "software": {
            "torch": _version("torch"), "triton": _version("triton"), "sglang": _version("sglang"),
            "sglang_dir": sglang_dir, "flash_mla": _version("sgl-flash-mla") or _version("flash_mla"),
            "flashinfer": _version("flashinfer-python") or _version("flashinfer"),
            # Our split-K kernel travels with this repository; the box has it only where the repo is.
            "splitk_kernel": _module_present("tools.kernels.sparse_mla_decode"),
        },
    }


def main() -> int:
    print(json.dumps(survey(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
