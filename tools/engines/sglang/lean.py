"""SGLang's server modules without its package's ``__init__``: what the stand-in server, the agent's argument
checks and the client's forkserver import before anything of sglang's.

``import sglang.srt.server_args`` first runs ``sglang/__init__.py`` (sglang 0.5.23), which imports SGLang's
frontend language API (``sglang.lang``) and applies its patches to Hugging Face ``transformers`` (importing
transformers): some 8 of the 11-12 s of a core the import takes on the 2-core CPU box, paid again by every
stand-in launch and every investigation's argument check. None of it touches the server's arguments, their
parser, ``sglang.srt.environ``, the plugin framework or the benchmark client's code: the frontend API is
for programs written in SGLang's language, the patches for loading Hugging Face models, which the stand-in
never does. ``lean()`` registers the ``sglang`` package as the import system would, without running its
``__init__``, and makes the one call of it that sets process state (``redirect_third_party_caches``), so
that every ``sglang.*`` module imported after it is SGLang's own file, unchanged.
(tests/test_sglang_lean.py: the parser, its parse of every shipped target's arguments and levers, and the
environment fields are the same as under the full import.)

A real SGLang server (``python -m sglang.launch_server``) imports the whole package, as it should; so does a
process that imported ``sglang`` before calling ``lean()``: then this does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types

PACKAGE = "sglang"


def lean() -> bool:
    """Make ``sglang`` importable without its ``__init__`` (see the module docstring). True when this call
    registered it; False when sglang was imported already (whole or lean), or is not installed (the import
    that follows fails as it would have)."""
    if PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return False
    module = types.ModuleType(PACKAGE, "SGLang's package, registered without its __init__ (tools/engines/sglang/lean.py)")
    module.__spec__ = spec
    module.__path__ = list(spec.submodule_search_locations)
    module.__file__ = spec.origin
    module.__package__ = PACKAGE
    module.__loader__ = spec.loader
    sys.modules[PACKAGE] = module
    from sglang.srt import environ

    # the one call of sglang/__init__.py (0.5.23) that sets what a later import reads; 0.5.17's __init__ has no
    # such call (nor the function), so a release tree without it is left as its own __init__ would leave it
    redirect = getattr(environ, "redirect_third_party_caches", None)
    if redirect is not None:
        redirect()
    return True
