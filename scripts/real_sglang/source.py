"""sglang 0.5.17's source for the adapter on a CPU box: the release the H200's real server runs (it pins the GPU
machine's torch 2.11), read here beside the 0.5.23 the venv has installed (issue #34). ``make setup`` runs it.

``python -m scripts.real_sglang.source`` downloads the release's wheel (pip, no dependencies), checks its sha256,
and unpacks its Python files and its dist-info into ``.cache/sglang-0.5.17/tree`` (git-ignored); then installs
into ``.cache/sglang-0.5.17/site`` the release's own pins of what its server-argument module imports and the
venv's 0.5.23 set lacks or has at a version 0.5.17 cannot take (see SITE). Nothing of it goes into the venv:
the adapter puts both folders first on its path only when told to read this release
(tools/engines/sglang/release.py). Prints the tree's path.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.5.17"
CACHE = ROOT / ".cache" / f"sglang-{VERSION}"
TREE = CACHE / "tree"
SITE_DIR = CACHE / "site"
# The cp312 wheel (the GPU machine's Python; its .py files are the same in every tag), pinned by hash.
WHEEL = "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "fb4cba478a5dca5ee146550b39f33add1c4e475d21ee11810b86ed1c58068093"
# What ``import sglang.srt.server_args`` of 0.5.17 needs beyond the venv (found by importing it on this venv):
# transformers at 0.5.17's pin (the venv's newer one registers "qwen3_asr" itself, which 0.5.17's
# configs/qwen3_asr.py registers again and AutoConfig refuses) with the tokenizers it accepts, and module-level
# imports 0.5.23's import chain does not reach; pinned as the release pins them or as carried to the H200.
SITE = ["transformers==5.12.1", "tokenizers==0.22.2", "openai==2.6.1", "partial-json-parser==0.2.1.1.post7",
        "xgrammar==0.2.1", "apache-tvm-ffi==0.1.11", "compressed-tensors==0.20.1", "loguru==0.7.3",
        "gguf==0.19.0", "sentencepiece==0.2.3", "einops==0.8.2"]
STAMP = CACHE / ".complete"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def _signature() -> str:
    return " ".join([VERSION, WHEEL_SHA256, *SITE]) + "\n"


def fetch() -> Path:
    """The tree's path, fetched first unless the cache holds this very release and pins."""
    if STAMP.is_file() and STAMP.read_text() == _signature():
        STAMP.touch()  # make's target: newer than this script
        return TREE
    with tempfile.TemporaryDirectory() as tmp:
        _pip("download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation",
             "cp", "--platform", "manylinux_2_34_x86_64", "-d", tmp, f"sglang=={VERSION}")
        wheel = Path(tmp) / WHEEL
        if _sha256(wheel) != WHEEL_SHA256:
            raise SystemExit(f"{WHEEL}: sha256 {_sha256(wheel)} is not the pinned {WHEEL_SHA256}")
        TREE.mkdir(parents=True, exist_ok=True)
        # the package and its dist-info only: the wheel also holds a top-level ``tools/`` folder, which would
        # shadow this project's ``tools`` package on the path; the compiled cp312 extensions are of no CPU use here
        keep = ("sglang/", f"sglang-{VERSION}.dist-info/")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(TREE, [n for n in archive.namelist() if n.startswith(keep) and not n.endswith(".so")])
    _pip("install", "-q", "--no-deps", "--no-compile", "--upgrade", "--target", str(SITE_DIR), *SITE)
    STAMP.write_text(_signature())
    return TREE


if __name__ == "__main__":
    print(fetch())
