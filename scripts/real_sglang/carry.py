"""The carry of a real SGLang server (0.5.17) to the GPU machine: the wheels its launch and SGLang's benchmark
client import that the machine's image lacks, downloaded here for its Python 3.12, cut into parts that fit the
device tool's calls beside the tree, and the calls that bring them over and install them (issue #34).

``python -m scripts.real_sglang.carry build [--part-mib N] [--full-sgl-kernel]``  (here: downloads, packs, plans)
``python3 -m scripts.real_sglang.carry install``  (on the GPU machine, in the last call: checks, installs)
``python -m scripts.real_sglang.carry plan``  (prints the call sequence of what build left in .carry/)

Why each wheel (read from 0.5.17's source: scripts/real_sglang/imports.py lists the third-party modules its
launch and client import at module level; the image's own packages are in IMAGE_HAS and are not carried):
SERVER holds what ``python -m sglang.launch_server`` imports, CLIENT what ``python -m sglang.bench_serving`` adds
(``sglang.benchmark.datasets`` imports Hugging Face ``datasets`` at module level, and with it pyarrow, the
largest wheel: its group is carried last, after the server has been seen to start). Versions are pinned: the
release's own pins where it has one (sglang's METADATA), else the version current when this list was made.

sglang-kernel 0.4.5 is 383 MB, 1.2 GB unpacked, of which 1.12 GB is ``flash_ops.abi3.so``: FlashAttention-3,
which ``sgl_kernel/flash_attn.py`` loads only when imported, and which no module of the DeepSeek-V4 path imports
(its attention is FlashMLA, ``flashmla_ops.abi3.so``; FA3 is loaded lazily, in
``kernels/ops/attention/flash_attention_v3.py``'s functions). ``build`` repacks the wheel without it and without
``sm100/`` (sgl_kernel/load_utils.py loads ``sm90/common_ops`` on compute capability 90): the carry goes from
some 35 calls to a handful. ``--full-sgl-kernel`` carries the wheel as published. If a launch then fails with
"Can not import FA3 in sgl_kernel", the path did need it: carry the full wheel.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from . import bundle

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".carry"  # git-ignored (.gitignore)
SITE = ".carry/site"  # where the last call installs, relative to the repository root on the device
DEVICE_MIB = 64  # the device tool's limit on what travels in one call, the tree included
MARGIN = 1 << 20

SERVER = [
    "sglang==0.5.17", "sglang-kernel==0.4.5", "flashinfer-python==0.6.15.post1",
    # DeepGEMM: DeepSeek-V4's c4 indexer calls deep_gemm.fp8_paged_mqa_logits by default on CUDA
    # (srt/layers/attention/dsv4/indexer.py), and the FP8 GEMMs' JIT kernels on Hopper use it when it imports
    "sgl-deep-gemm==0.1.5.post1", "apache-tvm-ffi==0.1.11",
    # the image's transformers 5.17 registers "qwen3_asr" itself, which 0.5.17's configs/qwen3_asr.py registers
    # again at import (AutoConfig.register raises): 0.5.17's own pin, and the tokenizers that pin accepts
    "transformers==5.12.1", "tokenizers==0.22.2",
    "torchvision==0.26.0",  # srt/utils/common.py imports torchvision.io at module level (torch 2.11's release)
    # openai's sniffio: anyio 4.x no longer needs it, so the image (which has anyio) lacks it; found on the H100
    "sniffio==1.3.1",
    "xgrammar==0.2.1", "openai==2.6.1", "jiter==0.19.0", "distro==1.9.0", "partial-json-parser==0.2.1.1.post7",
    "compressed-tensors==0.20.1", "loguru==0.7.3", "fastapi==0.165.0",
    # fastapi 0.165's own requirements (its telemetry imports opentelemetry), and tabulate, flashinfer's
    "annotated-doc==0.0.7", "opentelemetry-api==1.45.3", "importlib-metadata==8.7.0", "zipp==4.1.2",
    "tabulate==0.10.0", "starlette==1.10.0", "pydantic==2.14.4",
    "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5", "uvicorn==0.55.0",
    "click==8.5.1", "h11==0.16.0", "orjson==3.13.0", "pyzmq==27.3.0", "pybase64==1.5.1",
    "python-multipart==0.0.34", "setproctitle==1.3.8", "msgspec==0.23.0", "gguf==0.19.0", "zstandard==0.25.0",
    "soundfile==0.14.0", "cffi==2.1.1", "pycparser==3.12", "dill==0.4.1", "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1", "attrs==26.1.0",
    "cuda-python==13.4.4", "cuda-bindings==13.5.0", "cuda-pathfinder==1.9.1", "prometheus-client==0.26.0",
    "nvidia-ml-py==13.615.71",
    # DeepSeek-V4's hyper-connection kernels (kernels/ops/layernorm/mhc.py, SGLANG_OPT_USE_TILELANG_MHC_PRE and
    # _POST default on) compile with TileLang when the decode graph is captured; without it the H100 launch died
    # there. TileLang's own requirements follow it
    "tilelang==0.1.11", "z3-solver==4.15.4.0", "torch-c-dlpack-ext==0.1.5", "cloudpickle==3.1.3", "ml-dtypes==0.7.0",
    # sglang/utils.py imports IPython.display at module level
    "ipython==9.19.1", "traitlets==5.16.1", "jedi==0.20.1", "parso==0.8.7", "prompt-toolkit==3.0.53",
    "wcwidth==0.9.5", "pygments==2.21.0", "decorator==5.3.2", "matplotlib-inline==0.2.2", "stack-data==0.6.3",
    "executing==2.3.0", "asttokens==3.0.2", "pure-eval==0.2.4", "pexpect==4.9.0", "ptyprocess==0.7.0",
    "ipython-pygments-lexers==1.1.1",
]
CLIENT = ["datasets==5.2.0", "pyarrow==26.0.1", "multiprocess==0.70.19", "xxhash==4.1.0", "fsspec==2026.9.0"]
GROUPS = {"server": SERVER, "client": CLIENT}
# What the H200's image has (issue #34, checked 2026-12-03): not carried.
# torch's own dependencies (jinja2, typing_extensions, filelock) and transformers 5.17's (huggingface_hub,
# safetensors, regex, tqdm, packaging, pyyaml, requests) come with those two; pillow is an assumption the
# GPU machine's ``--missing`` check (imports.py) verifies before the first launch.
IMAGE_HAS = ("torch", "triton", "numpy", "pandas", "jinja2", "typing_extensions", "pyyaml", "aiohttp", "einops",
             "ninja", "numba", "psutil", "scipy", "sentencepiece", "tiktoken", "uvloop", "requests", "tqdm",
             "packaging", "filelock", "huggingface_hub", "safetensors", "regex", "pillow")
# Import names whose distribution is named otherwise (the rest: the import name, "_" read as "-").
PROVIDES = {"IPython": "ipython", "PIL": "pillow", "zmq": "pyzmq", "yaml": "pyyaml", "sgl_kernel": "sglang-kernel",
            "flashinfer": "flashinfer-python", "deep_gemm": "sgl-deep-gemm", "cuda": "cuda-python",
            "tvm_ffi": "apache-tvm-ffi", "multipart": "python-multipart"}

PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
             "manylinux1_x86_64")
SLIM_DROP = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/")


def download(requirements: list[str], dest: Path) -> list[Path]:
    """pip's own download of each pinned wheel for cp312 on x86-64 Linux, no dependencies (the list is explicit)."""
    if dest.exists():  # a wheel left from an earlier list would be carried beside its replacement
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + requirements, check=True)
    return sorted(dest.glob("*.whl"))


def _dist(name: str) -> str:
    return name.split("==")[0].lower().replace("-", "_").replace(".", "_")


def uncovered(import_names) -> list[str]:
    """The import names (imports.py's walk) that neither a carried wheel nor the image provides."""
    have = {_dist(r) for group in GROUPS.values() for r in group} | {_dist(n) for n in IMAGE_HAS}
    return sorted(n for n in import_names if _dist(PROVIDES.get(n, n)) not in have)


def slim_sgl_kernel(wheel: Path, dest: Path) -> Path:
    """The sglang-kernel wheel without SLIM_DROP (see the module docstring), its RECORD rewritten to match."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename.startswith(SLIM_DROP):
                continue
            data = src.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if not line.decode().startswith(SLIM_DROP))
            dst.writestr(item, data)
    return out


# The GPU machine's interpreter, for the markers of the carried wheels' requirements.
MARKER_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
# What the image has besides IMAGE_HAS because its transformers 5.17 needs it (huggingface_hub 1.x: httpx and
# its own dependencies), or the standard library covers on 3.12 (checked on the H100 on 2026-12-07 with
# importlib.metadata over the installed carry: only sniffio was missing, now carried); what build reports as
# unmet leaves these out.
IMAGE_ALSO = ("httpx", "httpcore", "anyio", "idna", "certifi", "h11", "typer", "shellingham", "rich",
              "markdown-it-py", "mdurl", "pygments", "hf-xet", "fsspec", "markupsafe", "networkx", "sympy", "mpmath",
              "setuptools", "nvidia-ml-py", "charset-normalizer", "urllib3", "six", "python-dateutil", "pytz",
              "tzdata", "llvmlite")


def unmet_requirements(wheels: list[Path]) -> dict[str, list[str]]:
    """Each carried wheel's own requirements (METADATA Requires-Dist, markers read for the GPU machine's Python,
    extras left out) that no carried wheel, IMAGE_HAS nor IMAGE_ALSO provides: what a launch may still miss."""
    from packaging.requirements import Requirement

    have = {_dist(w.name.split("-")[0]) for w in wheels} | {_dist(n) for n in IMAGE_HAS + IMAGE_ALSO}
    unmet: dict[str, list[str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            lines = archive.read(meta).decode(errors="replace").splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is not None and not requirement.marker.evaluate(MARKER_ENV):
                continue
            if _dist(requirement.name) not in have:
                unmet.setdefault(wheel.name.split("-")[0], []).append(str(requirement))
    return unmet


def tree_bytes() -> int:
    """What travels with every call besides the carried paths: tracked files and untracked ones git keeps."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.split(b"\0")
    return sum((ROOT / name.decode()).stat().st_size for name in listed if name and (ROOT / name.decode()).is_file())


def build(part_bytes: int | None, full_kernel: bool) -> dict:
    tree = tree_bytes()
    part_bytes = part_bytes or (DEVICE_MIB << 20) - tree - MARGIN
    if part_bytes < (1 << 20):
        raise SystemExit(f"the tree is {tree / 2**20:.1f} MiB: no room for a part beside it in {DEVICE_MIB} MiB")
    summary = {"tree_bytes": tree, "part_bytes": part_bytes, "groups": {}}
    carried: list[Path] = []
    for group, requirements in GROUPS.items():
        wheels = download(requirements, CARRY / "wheels" / group)
        carried += wheels
        if group == "server" and not full_kernel:
            kernel = next(w for w in wheels if w.name.startswith("sglang_kernel-"))
            wheels = [w for w in wheels if w != kernel] + [slim_sgl_kernel(kernel, CARRY / "slim")]
            summary["sgl_kernel"] = {"published_bytes": kernel.stat().st_size,
                                     "slim_bytes": wheels[-1].stat().st_size}
        manifest = bundle.pack(wheels, CARRY / "parts" / group, part_bytes)
        summary["groups"][group] = {"wheels": len(manifest["wheels"]), "wheel_bytes": manifest["tar"]["bytes"],
                                    "parts": len(manifest["parts"])}
    summary["unmet_requirements"] = unmet_requirements(carried)
    (CARRY / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def plan() -> list[dict]:
    """The device tool's calls, in order, each started within 30 s of the last one's end."""
    calls = []
    for group in GROUPS:
        folder = CARRY / "parts" / group
        manifest = json.loads((folder / bundle.MANIFEST).read_text())
        names = [f".carry/parts/{group}/{p['name']}" for p in manifest["parts"]]
        for index, name in enumerate(names):
            last = index == len(names) - 1
            carry = [name] + ([f".carry/parts/{group}/{bundle.MANIFEST}"] if last else [])
            command = (f"python3 -m scripts.real_sglang.carry install --group {group}" if last
                       else f"ls .carry/parts/{group}")  # a part only travels; the listing shows what arrived
            calls.append({"carry": carry, "command": command})
    return calls


def install(group: str) -> int:
    """On the GPU machine: check and join the group's parts, then pip-install its wheels, no index and no
    dependencies, into .carry/site (git-ignored, so it stays while the machine is warm)."""
    wheels = bundle.reassemble(ROOT / ".carry" / "parts" / group, ROOT / ".carry" / "unpacked" / group)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(ROOT / SITE)] + [str(w) for w in wheels], check=True)
    # Bytecode once, on all cores: the server's processes import thousands of sglang modules at every launch,
    # and pip's own compile is one process (attempt 7: 33 s of imports in the scheduler at a warm relaunch).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(ROOT / SITE)], check=False)
    for wheel in wheels:  # the wheels are installed; the space is freed for the next group
        wheel.unlink()
    # sglang's wheel also installs a top-level ``tools/`` (its get_version_tag.py), which would shadow this
    # project's ``tools`` package for any process with the site ahead of the checkout on its path
    stray = ROOT / SITE / "tools"
    if (stray / "get_version_tag.py").is_file():
        shutil.rmtree(stray)
    print(json.dumps({"installed": group, "wheels": len(wheels), "site": SITE}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.real_sglang.carry", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download, repack, cut into parts, write .carry/ and print the plan")
    b.add_argument("--part-mib", type=float, help="part size (default: 64 MiB less the tree, less 1 MiB)")
    b.add_argument("--full-sgl-kernel", action="store_true", help="carry sglang-kernel as published (1.2 GB)")
    sub.add_parser("plan", help="print the call sequence for what build left in .carry/")
    i = sub.add_parser("install", help="on the GPU machine: check, join and install a group")
    i.add_argument("--group", choices=sorted(GROUPS), required=True)
    args = parser.parse_args(argv)
    if args.command == "install":
        return install(args.group)
    if args.command == "build":
        summary = build(int(args.part_mib * 2**20) if args.part_mib else None, args.full_sgl_kernel)
        print(json.dumps(summary, indent=1))
    print(json.dumps(plan(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
