"""The client shim: a stand-in for one module of the installed SGLang, on the benchmark client's path only.

The adapter puts this folder first on PYTHONPATH of the ``python -m sglang.benchmark.serving`` subprocess, and
only when the real import fails there (client.py tries it first). Never on the server's or the agent's path.

Stubs (STUBS names them; the result's ``client_shims`` lists them):
- ``sglang.srt.disaggregation.utils``: the client imports only ``FAKE_BOOTSTRAP_HOST`` from it (for
  ``--fake-prefill``), but importing the real module imports ``sglang.srt.configs``, whose model configs reach
  ``sglang.srt.multimodal.internvl_utils`` -> ``torchvision``, which a CPU box does not have (its wheel pulls
  the CUDA torch). The stub holds that one constant, read from the installed file by ``ast``, not copied.
"""

import ast
import importlib.util
import sys
import types
from pathlib import Path

STUBS = ["sglang.srt.disaggregation.utils"]


def _installed_constant(relative: str, name: str):
    spec = importlib.util.find_spec("sglang")  # a top-level spec: sglang itself is not imported
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise ImportError(f"client shim: {name} is not assigned in {path}")


def _install() -> None:
    stub = types.ModuleType(STUBS[0], "client shim (tools/engines/sglang/client_shim): FAKE_BOOTSTRAP_HOST only")
    stub.FAKE_BOOTSTRAP_HOST = _installed_constant("srt/disaggregation/utils.py", "FAKE_BOOTSTRAP_HOST")
    sys.modules[STUBS[0]] = stub


_install()
