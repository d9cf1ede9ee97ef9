"""scan(): find the capability gates of an engine source tree, statically.

Pipeline: every .py file is parsed once in worker processes for a pre-pass (names, definitions,
imports); a syntactic closure from the capability/environment primitives picks the files and tests
worth interpreting; each such test is evaluated by the interpreter for every SM in SM_VERSIONS
(only once when it never reads the capability); tests whose answer depends on the SM are gates,
tests that only read environment variables are kept when they select an architecture-specific
path. Helpers, constants, import probes and environment switches are reported beside them.
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import Callable
from pathlib import Path

from .assemble import assemble
from .index import discover
from .model import SM_VERSIONS, GateScan, Unresolved
from .prepass import summarize_all
from .project import build_project
from .relevance import relevance
from .verdicts import ScanState
from .walker import Collected, walk_all


@contextmanager
def _no_gc():
    # Many AST objects stay alive during a scan; the cyclic collector would re-walk them all on
    # every generation-2 pass and triple the time. Nothing here creates garbage cycles that matter.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def scan(
    source_root: Path,
    *,
    sms: tuple = SM_VERSIONS,
    cuda: str | None = None,
    include_tests: bool = False,
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> GateScan:
    """Statically scan the engine source tree at `source_root` for capability gates.

    Nothing in the tree is imported. Every gate is evaluated for each compute capability in `sms`
    (major*10+minor) under the interpreter's stated assumptions (CUDA platform; environment at
    its defaults; `cuda` as torch.version.cuda, default newer than any check). What the scan cannot
    resolve is listed in `unresolved` with file:line and the reason. The returned scan keeps its
    live state (`scan.state`) for `evaluate(..., env=...)` and `fallbacks_for_kernels`.
    `progress(phase, done, total)` is told the files done in each phase ("read", then "interpreted").
    """
    source_root = Path(source_root).resolve()
    if not source_root.is_dir():
        raise FileNotFoundError(f"{source_root} is not a directory")
    sms = tuple(sorted(set(int(s) for s in sms)))
    timings: dict = {}
    with _no_gc():
        t0 = time.perf_counter()
        files = discover(source_root, include_tests=include_tests)
        summaries = summarize_all(files, workers=workers,
                                  progress=(lambda done, total: progress("read", done, total)) if progress else None)
        timings["prepass_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        rel = relevance(summaries)
        project = build_project(source_root, files, summaries, rel)
        state = ScanState(project, sms, cuda, timings=timings)
        collected = Collected()
        candidates = []
        for summary in summaries:
            if summary.error is not None:
                collected.unresolved.append(Unresolved(summary.rel, "", f"file not parsed: {summary.error}"))
                continue
            if any(rel.classify(summary, summary.names, summary.attrs)):
                candidates.append(summary)
        interpreted = len(candidates)
        told = (lambda done, total: progress("interpreted", done, total)) if progress else None
        for part in walk_all(state, candidates, workers, told):
            collected.merge(part)
        timings["interpret_s"] = time.perf_counter() - t1
        result = assemble(state, summaries, collected, source_root, interpreted, len(files))
        timings["total_s"] = time.perf_counter() - t0
    return result
