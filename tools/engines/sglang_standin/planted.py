"""What the stand-in's server flags do: the planted effects and the flags mapped onto the reference engine.

Every number a planted flag changes is a constant here, so a test can compute the effect it must measure
(the table is in the package docstring). Nothing here imports torch or sglang: the server reads its
ServerArgs (sglang's own dataclass) and calls these.
"""

from __future__ import annotations

from dataclasses import dataclass

# A host sleep at the start of every scheduler iteration (prefill or decode), on every rank: what an
# SGLang scheduler pays per iteration (batch building, sampling bookkeeping, output processing). Sized
# against the CPU shapes' step (~30-80 ms on a loaded 2-core box, run-to-run spread ~14%): a third of a
# step or more, so a lever sweep can tell the planted effects from the noise.
SCHEDULER_OVERHEAD_MS = 30.0
# A host sleep after every decode step when the decode CUDA graph is off: the launch overhead of eager decode.
EAGER_DECODE_DELAY_MS = 15.0
# --mem-fraction-static above this dies at start with a CUDA-OOM-like traceback (a planted crash).
OOM_MEM_FRACTION = 0.92
# Both planted sleeps times this factor, from the server's environment (default 1): a test that measures them
# through the client on a busy machine scales them above what the load adds to the real per-iteration work.
PLANT_SCALE_ENV = "PERF_INVESTIGATOR_STANDIN_PLANT_SCALE"

# SGLANG_SM120_FLASHMLA_BACKEND -> the reference engine's attention backend, as the agent maps it for the
# reference engine (agent/engine_runs.py REFERENCE_BACKENDS; a box tool cannot import agent.*).
ATTENTION_BACKENDS = {"triton": "sglang-triton", "torch": "torch", "splitk": "splitk"}
# sglang 0.5.23 kernels/ops/attention/flash_mla_sm120.py:209,316,343: "flashinfer" (the default, environ.py:1272)
# and "triton" are tested by name; every other value falls through to the torch path.
SGLANG_DEFAULT_ATTENTION = "flashinfer"

# --moe-runner-backend -> the reference engine's MoE implementation. The reference engine has two:
# "grouped" (one torch._grouped_mm per projection over the tokens sorted by expert) and "loop" (two
# GEMMs per expert that got tokens). The mapping is the stand-in's choice; the speed difference is real.
MOE_LOOP_BACKENDS = ("triton", "triton_kernel")


class PlantedCrash(RuntimeError):
    """A flag the stand-in answers by dying at start, as the real server would (traceback, exit 1)."""


class OutOfMemoryError(PlantedCrash):
    """Named as torch's, so a log reader that looks for SGLang's CUDA OOM finds the same words."""


@dataclass(frozen=True)
class Effects:
    """The per-run numbers the scheduler and the rank processes apply."""

    overhead_ms: float
    decode_steps: int
    eager_delay_ms: float
    moe: str
    ep: int
    attention: str | None  # None: the spec's own
    notes: tuple[str, ...]
    scale: float = 1.0  # PLANT_SCALE_ENV: both sleeps are the constants times this


def startup_crash(args) -> PlantedCrash | None:
    """The planted crash the server args ask for, or None (checked before any weight is built)."""
    fraction = args.mem_fraction_static
    if fraction is not None and fraction > OOM_MEM_FRACTION:
        return OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.00 GiB "
            f"(planted by the stand-in: --mem-fraction-static {fraction} > {OOM_MEM_FRACTION})")
    if args.attn_dp_size > 1:
        return PlantedCrash(f"the stand-in has no DP attention (--attn-dp-size {args.attn_dp_size})")
    if args.dp_size > 1:
        return PlantedCrash(f"the stand-in has no data parallelism (--dp-size {args.dp_size})")
    if args.pp_size > 1:
        return PlantedCrash(f"the stand-in has no pipeline parallelism (--pp-size {args.pp_size})")
    return None


def attention_of(env: dict[str, str]) -> tuple[str | None, str | None]:
    """(reference backend or None for the spec's own, a log note) from SGLANG_SM120_FLASHMLA_BACKEND.

    Unset: the spec's own backend (sglang would take flashinfer, its default; the spec's caller chose).
    Raises PlantedCrash for flashinfer: the reference engine has no FlashInfer backend."""
    value = env.get("SGLANG_SM120_FLASHMLA_BACKEND")
    if value is None:
        return None, None
    if value == SGLANG_DEFAULT_ATTENTION:
        raise PlantedCrash("SGLANG_SM120_FLASHMLA_BACKEND=flashinfer: the stand-in's reference engine has no "
                           "FlashInfer backend")
    if value in ATTENTION_BACKENDS:
        return ATTENTION_BACKENDS[value], f"SGLANG_SM120_FLASHMLA_BACKEND={value} -> {ATTENTION_BACKENDS[value]}"
    return "torch", (f"SGLANG_SM120_FLASHMLA_BACKEND={value!r} is not a name sglang 0.5.23 tests: it runs the torch "
                     f"path (flash_mla_sm120.py), and so does the stand-in")


def plant_scale(env: dict[str, str]) -> float:
    """PERF_INVESTIGATOR_STANDIN_PLANT_SCALE from the server's environment (1 when unset); PlantedCrash when it is
    not a positive number, so a mistyped scale is a failed start, never silently the default."""
    text = env.get(PLANT_SCALE_ENV)
    if text is None:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        scale = float("nan")
    if not scale > 0 or scale == float("inf"):
        raise PlantedCrash(f"{PLANT_SCALE_ENV}={text!r} is not a positive number")
    return scale


def effects(args, env: dict[str, str]) -> Effects:
    """The planted and mapped effects of ``args`` (sglang ServerArgs) and the server's environment."""
    attention, note = attention_of(env)
    scale = plant_scale(env)
    overhead_ms, eager_ms = SCHEDULER_OVERHEAD_MS * scale, EAGER_DECODE_DELAY_MS * scale
    eager = args.cuda_graph_backend_decode == "disabled"
    moe = "loop" if args.moe_runner_backend in MOE_LOOP_BACKENDS else "grouped"
    notes = [f"scheduler overhead {overhead_ms} ms per iteration, {args.num_continuous_decode_steps} "
             f"decode step(s) per decode iteration",
             f"--cuda-graph-backend-decode {args.cuda_graph_backend_decode}: "
             + (f"+{eager_ms} ms per decode step" if eager else "no delay"),
             f"--moe-runner-backend {args.moe_runner_backend} -> reference moe {moe}"]
    if scale != 1.0:
        notes.insert(0, f"planted sleeps scaled by {scale:g} ({PLANT_SCALE_ENV})")
    if note:
        notes.append(note)
    return Effects(overhead_ms=overhead_ms, decode_steps=max(1, args.num_continuous_decode_steps),
                   eager_delay_ms=eager_ms if eager else 0.0, moe=moe, ep=args.ep_size,
                   attention=attention, notes=tuple(notes), scale=scale)


def expected_tpot_ms(step_ms: float, decode_steps: int, eager: bool, scale: float = 1.0) -> float:
    """A decode-only iteration's time per output token: the step, the eager delay, the overhead shared by
    the iteration's steps (prefill iterations come on top, once per admitted request batch)."""
    return step_ms + scale * ((EAGER_DECODE_DELAY_MS if eager else 0.0) + SCHEDULER_OVERHEAD_MS / decode_steps)
