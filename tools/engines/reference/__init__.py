"""The reference engine: DeepSeek-V4-Flash decode layers in PyTorch, random weights, sparse MLA attention by a
chosen backend (torch, sglang-triton, splitk); one process standing for one tensor-parallel rank, or
(``distributed``) one process per rank joined by torch.distributed, NCCL on GPUs and gloo on the CPU
(multirank.py, spawn.py), with tensor or expert parallelism cut as SGLang cuts them (shard.py, collective.py).

Run as ``python -m tools.engines.reference bench --spec SPEC --out DIR`` (see ``__main__``); the
spec is ``spec.BenchSpec``.
"""
