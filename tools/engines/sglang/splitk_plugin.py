"""SGLang plugin that puts the split-K rewrite in place of SGLang's sm_120 Triton sparse decode.

SGLang has no flag for a replacement kernel, but 0.5.23 has a plugin framework (sglang/srt/plugins): every
server process (``Engine.__init__``, each ``run_scheduler_process``) calls ``load_plugins()``, which loads
the entry points of group ``sglang.srt.plugins`` (``SGLANG_PLUGINS``, when set, names those allowed) and
applies the hooks they registered with ``HookRegistry``. ``register`` registers one REPLACE hook on
``flash_mla_sparse_decode_triton``: SGLang sets the module attribute (and every stale ``from ... import``
binding), and ``flash_mla_with_kvcache_sm120`` imports that attribute at each call when
``SGLANG_SM120_FLASHMLA_BACKEND=triton``, so the split-K function
(``tools.kernels.sparse_mla_decode.sparse_mla_decode``, same signature and returns) is what it calls.

The entry point is declared by ``plugin/perf_investigator_splitk-1.0.dist-info`` beside this file: a
distribution's metadata that ``importlib.metadata`` finds on ``sys.path``, so nothing is pip-installed.
Putting it in place is two ``PYTHONPATH`` entries (this repository, for ``tools``, and the ``plugin``
directory) and the Triton backend selected: ``launch_env`` gives them. Each process that serves a call says
so once on stderr (the server log), so the swap can be seen in place.

Imports only the standard library at import time (the split-K module, with torch and Triton, at the first
call); never ``agent.*``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TARGET = "sglang.kernels.ops.attention.flash_mla_sm120_triton.flash_mla_sparse_decode_triton"
GROUP = "sglang.srt.plugins"
NAME = "perf_investigator_splitk"
BACKEND_ENV = "SGLANG_SM120_FLASHMLA_BACKEND"
BACKEND = "triton"  # the backend whose function is replaced: the others never call it
PLUGIN_DIR = Path(__file__).resolve().with_name("plugin")
REPO_ROOT = Path(__file__).resolve().parents[3]
SPLITK = "tools.kernels.sparse_mla_decode.sparse_mla_decode"
ANNOUNCE = "perf-investigator split-K plugin:"

calls = 0  # calls served in this process (the tests read it; SGLang never does)


def launch_env(repo_root: str | Path | None = None) -> dict[str, str]:
    """The environment that puts the rewrite in place for ``python -m sglang.launch_server``: the Triton
    backend, and ``PYTHONPATH`` with the repository (``repo_root``, default this checkout's) and its plugin
    directory, before whatever ``PYTHONPATH`` the shell has (``$PYTHONPATH``, left for the shell to expand)."""
    root = Path(repo_root) if repo_root is not None else REPO_ROOT
    plugin = root / PLUGIN_DIR.relative_to(REPO_ROOT)
    return {BACKEND_ENV: BACKEND, "PYTHONPATH": os.pathsep.join([str(root), str(plugin), "$PYTHONPATH"])}


def splitk_decode(q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
                  extra_k_cache=None, extra_indices=None, extra_topk_length=None):
    """``flash_mla_sparse_decode_triton``'s contract, served by the split-K rewrite: (out ``[B, 1, H, 512]``
    bf16, lse ``[B, H, 1]`` float32)."""
    global calls
    from tools.kernels.sparse_mla_decode import sparse_mla_decode

    if calls == 0:  # the server log shows the swap took, once per process (a decode step calls it per layer)
        print(f"{ANNOUNCE} {TARGET.rsplit('.', 1)[1]} served by {SPLITK} (pid {os.getpid()})", file=sys.stderr,
              flush=True)
    calls += 1
    return sparse_mla_decode(q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
                             extra_k_cache, extra_indices, extra_topk_length)


def register() -> None:
    """The entry point SGLang's ``load_plugins`` calls: the REPLACE hook, applied by SGLang right after."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, splitk_decode, HookType.REPLACE)
