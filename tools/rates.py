"""Box-side rates: the copy bandwidth and matmul rate the box actually reaches, measured, never assumed.

``python -m tools.rates [--device auto|cpu|cuda]`` prints one JSON object; ``tools.survey`` includes
``measure()`` under ``rates``. They are the denominators of a kernel's floor (bytes / bandwidth, FLOPs /
matmul rate), so each is the median of repeats of one large operation:

- copy: ``dst.copy_(src)`` of a large byte tensor (device to device on a GPU, host memory on a CPU);
  the bandwidth counts the bytes read plus the bytes written (2 x size / time), as a kernel's byte
  count does.
- matmul: ``a @ b`` of square random matrices, 2 n^3 FLOPs each. On a GPU in bf16. On a CPU both bf16
  and float32 are measured (a CPU without native bf16 runs bf16 matmul several times slower than
  float32) and the faster is the rate used, named in ``matmul.dtype``: the floor is the best the box
  can do.

Sizes keep the whole measurement to seconds on a 2-core CPU. Without torch the result says so and
holds no rates.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time

# (bytes copied, copy repeats, matmul n, matmul repeats): big enough to leave caches and launch overhead
# behind, small enough that the survey stays seconds long (a CPU copy is cheap, so it gets more repeats).
SIZES = {"cuda": (1 << 30, 10, 8192, 10), "cpu": (1 << 28, 7, 2048, 3)}


def _timer(device):
    """A function timing one call of ``fn`` in seconds: CUDA events on a GPU, perf_counter on a CPU."""
    import torch

    if device.type == "cuda":
        def timed(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def timed(fn) -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    return timed


def _median_s(fn, repeats: int, timed) -> tuple[float, list[float]]:
    fn()  # warm-up: allocation, page faults, library dispatch stay out of the samples
    samples = [timed(fn) for _ in range(repeats)]
    return statistics.median(samples), samples


def copy_bandwidth(device, size: int, repeats: int) -> dict:
    import torch

    src = torch.ones(size, dtype=torch.uint8, device=device)  # touched: no lazy zero pages
    dst = torch.empty_like(src)
    dst.fill_(0)
    median_s, samples = _median_s(lambda: dst.copy_(src), repeats, _timer(device))
    return {"bytes_copied": size, "repeats": repeats, "median_s": median_s, "samples_s": samples,
            "bytes_moved": 2 * size, "gb_s": 2 * size / median_s / 1e9}


def matmul_rate(device, n: int, repeats: int, dtype_name: str) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn((n, n), generator=gen, device=device).to(dtype)
    b = torch.randn((n, n), generator=gen, device=device).to(dtype)
    median_s, samples = _median_s(lambda: a @ b, repeats, _timer(device))
    return {"dtype": dtype_name, "n": n, "repeats": repeats, "median_s": median_s, "samples_s": samples,
            "flops": 2 * n ** 3, "tflop_s": 2 * n ** 3 / median_s / 1e12}


def measure(requested: str = "auto") -> dict:
    """The box's copy bandwidth and matmul rate on ``requested`` (auto: the first GPU, else the CPU).

    Returns {device, copy, matmul, matmul_all} or {device, error} when torch is missing or the
    measurement fails (a result, not a crash: the survey must still report the box).
    """
    if importlib.util.find_spec("torch") is None:
        return {"device": None, "error": "torch is not installed on the box"}
    import torch

    try:
        kind = ("cuda" if torch.cuda.is_available() else "cpu") if requested == "auto" else requested
        device = torch.device(kind)
        size, copy_repeats, n, matmul_repeats = SIZES[kind]
        with torch.inference_mode():
            copy = copy_bandwidth(device, size, copy_repeats)
            dtypes = ["bfloat16"] if kind == "cuda" else ["bfloat16", "float32"]
            measured = [matmul_rate(device, n, matmul_repeats, d) for d in dtypes]
    except Exception as exc:  # noqa: BLE001 - an OOM or a driver error is the box's answer
        return {"device": requested, "error": f"{type(exc).__name__}: {exc}"[:500]}
    best = max(measured, key=lambda m: m["tflop_s"])
    return {"device": kind, "copy": copy, "matmul": best, "matmul_all": measured}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rates", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args(argv)
    result = measure(args.device)
    print(json.dumps(result, sort_keys=True))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
