"""The reference engine: DeepSeek-V4-Flash decode layers of one tensor-parallel rank in PyTorch, random
weights, sparse MLA attention by a chosen backend (torch, sglang-triton, splitk).

Run as ``python -m tools.engines.reference bench --spec SPEC --out DIR`` (see ``__main__``); the
spec is ``spec.BenchSpec``.
"""
