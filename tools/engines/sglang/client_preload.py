"""What the client's forkserver imports once (client.warm_up): everything ``sglang.benchmark.serving`` imports,
then not the module itself, so that each run executes it as ``__main__`` alone, as ``python -m`` does (a module
left in sys.modules would be a second copy beside ``__main__``, with globals the run never sets)."""

import importlib
import sys

MODULE = "sglang.benchmark.serving"

importlib.import_module(MODULE)
del sys.modules[MODULE]
if hasattr(sys.modules["sglang.benchmark"], "serving"):
    delattr(sys.modules["sglang.benchmark"], "serving")
