"""``python -m tools.engines.sglang_standin SGLANG-SERVER-ARGS...``: the SGLang stand-in server (see the package docstring).

Exit status as SGLang's launcher: 2 for arguments its parser refuses (argparse's own exit), 1 when the
server dies (a planted crash, a rank that fails, a port in use), 0 after SIGTERM / SIGINT.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback

# Rank processes building their weights at start (seconds at CPU shapes; minutes at a GPU's).
RANK_READY_TIMEOUT_S = 900.0
# --max-running-requests when not given (SGLang derives it from the KV pool; the stand-in has none).
DEFAULT_MAX_RUNNING = 32
# The warm-up request SGLang's launcher sends before it declares the server up (http_server.py _wait_and_warmup).
WARMUP_NEW_TOKENS = 4


class UsageError(Exception):
    """The stand-in cannot run as asked (exit 2, one line)."""


def _log(message: str) -> None:
    print(f"[sglang stand-in] {message}", file=sys.stderr, flush=True)


def _spec(args, effects):
    """The reference-engine bench spec from PERF_INVESTIGATOR_STANDIN_SPEC, with the server's flags applied."""
    from tools.engines.reference.spec import BenchSpec, parse_spec

    text = os.environ.get("PERF_INVESTIGATOR_STANDIN_SPEC")
    if not text:
        raise UsageError("PERF_INVESTIGATOR_STANDIN_SPEC is not set: the stand-in needs a reference-engine bench spec "
                         "(JSON, or @path) for its shapes")
    fields = parse_spec(text).model_dump()
    fields.update(tp=args.tp_size, distributed=args.tp_size > 1, ep=effects.ep, moe=effects.moe, profile=None,
                  cuda_graph=False, steps_per_graph=1, delay_frac=0.0)
    if effects.attention:
        fields["attention"] = effects.attention
    return BenchSpec.model_validate(fields)


def _interpret_triton(spec) -> None:
    """On a CPU box the Triton backends run under the interpreter; the rank processes inherit the setting."""
    import torch

    from tools.engines.reference.spec import TRITON_BACKENDS

    on_cpu = spec.device == "cpu" or (spec.device == "auto" and not torch.cuda.is_available())
    if on_cpu and spec.attention in TRITON_BACKENDS and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        os.environ["TRITON_INTERPRET"] = "1"


class _Lifetime:
    """The main thread waits here for SIGTERM / SIGINT or a fatal scheduler error."""

    def __init__(self):
        self.done = threading.Event()
        self.fatal: BaseException | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.done.set())

    def die(self, exc: BaseException) -> None:
        detail = getattr(exc, "detail", "")
        _log("Scheduler hit an exception:\n" + "".join(traceback.format_exception(exc)) + (detail or ""))
        self.fatal = exc
        self.done.set()


def _warm_up(app) -> None:
    req = app.scheduler_request(prompt_len=8, max_new_tokens=WARMUP_NEW_TOKENS)
    while True:
        kind, value = req.events.get()
        if kind == "error":
            raise RuntimeError(f"warm-up request failed: {value}")
        if kind == "done":
            return


def _serve(args, argv: list[str]) -> int:
    from . import pd, planted
    from .app import App
    from .pool import RankPool
    from .scheduler import Scheduler
    from .server import Server
    from .vocab import Vocab

    crash = planted.startup_crash(args)
    if crash is not None:
        raise crash
    effects = planted.effects(args, dict(os.environ))
    spec = _spec(args, effects)
    for note in effects.notes:
        _log(note)
    _log(f"model path {args.model_path} (load format {args.load_format}): no weights are read; the reference "
         f"engine's random weights at the spec's shapes, TP{spec.tp}, ep {spec.ep}, attention {spec.attention}")
    role = pd.role_for(args)
    _interpret_triton(spec)
    pool = RankPool(args.tp_size, spec.model_dump_json())
    life = _Lifetime()
    httpd = None
    try:
        ranks = pool.ready(RANK_READY_TIMEOUT_S)
        _log(f"ranks ready: {[(r['rank'], r['pid']) for r in ranks]}")
        vocab = Vocab.load([args.tokenizer_path, args.model_path], _log)
        scheduler = Scheduler(pool, effects, args.max_running_requests or DEFAULT_MAX_RUNNING, vocab.token_of, _log,
                              life.die)
        threading.Thread(target=scheduler.run, name="scheduler", daemon=True).start()
        app = App(args, scheduler, vocab, role, spec, effects, [{k: r[k] for k in ("rank", "pid", "device")} for r in ranks],
                  argv)
        httpd = Server((args.host, args.port), app)
        threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
        if not args.skip_server_warmup:
            _warm_up(app)
        app.status = "Up"
        _log(f"The server is fired up and ready to roll! (the stand-in, on http://{args.host}:{args.port})")
        life.done.wait()
        _log("shutting down" + (" after a fatal error" if life.fatal else ""))
        scheduler.closing = True
    finally:
        if httpd is not None:
            httpd.shutdown()
        if role is not None:
            role.stop()
        t0 = time.monotonic()
        pool.stop()
        _log(f"rank processes stopped in {time.monotonic() - t0:.1f} s")
    return 1 if life.fatal else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # SGLang's own parse (argparse + ServerArgs.add_cli_args + ServerArgs.from_cli_args): an unknown or
    # ambiguous flag exits 2 here with argparse's message, as `python -m sglang.launch_server` does. The package is
    # imported lean (tools/engines/sglang/lean.py: its __init__'s frontend API and transformers patches left out,
    # some 8 s of a core every launch), the parser and every module the server imports SGLang's own.
    from tools.engines.sglang.lean import lean

    lean()
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)
    _log("this is the perf-investigator STAND-IN for sglang.launch_server, not SGLang's server")
    try:
        return _serve(args, argv)
    except UsageError as exc:
        print(f"usage error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a server that cannot start dies with its traceback, as SGLang's does
        traceback.print_exc()
        if getattr(exc, "detail", ""):
            print(f"the failed rank's traceback:\n{exc.detail}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The ranks are joined and the server closed: skip the interpreter's teardown of sglang's and torch's
    # modules (seconds on a loaded box, which a sweep of many runs pays at every stop).
    os._exit(code)
