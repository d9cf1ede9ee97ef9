"""Continuous batching over the rank processes: SGLang's scheduler loop, reduced to what a load measures.

One thread owns the rank pool. Each iteration is a prefill or a decode, as SGLang's default scheduler
runs them (new requests first): a prefill admits waiting requests up to --max-running-requests and runs
one forward step at their batch size, which gives each its first token; a decode runs
--num-continuous-decode-steps forward steps over the running requests, one token per request per step
(a request leaves the batch at its max_new_tokens, so later steps of an iteration may be smaller).
Every iteration pays the planted scheduler overhead once (planted.py). Tokens reach the requests' queues
when the iteration's steps are done, as SGLang streams a batch's outputs after it runs.

A rank that fails ends the server (SGLang's scheduler death does the same): ``on_fatal`` gets the error.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from .planted import Effects
from .pool import RankPool
from .profiling import Profile, ProfileError


@dataclass
class Request:
    """One generation. ``events`` receives ("tokens", count) after each iteration that gave it tokens,
    ("done", count) after the last, or ("error", message)."""

    prompt_len: int
    max_new_tokens: int
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    events: queue.Queue = field(default_factory=queue.Queue)
    finished_at: float | None = None
    # disaggregated roles (pd.py): a prefill server's request ends after its first token; a decode server's
    # comes with its first token from the prefill server and joins the running batch without a forward
    prefill_only: bool = False
    prebuilt: bool = False
    ticket: object = None

    @property
    def remaining(self) -> int:
        return 0 if self.prefill_only and self.output_ids else self.max_new_tokens - len(self.output_ids)

    def e2e_latency(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.created


class Scheduler:
    """The iteration loop (``run`` in a thread) and the controls the HTTP handlers call."""

    def __init__(self, pool: RankPool, effects: Effects, max_running: int, token_of: Callable[[int, int], int],
                 log: Callable[[str], None], on_fatal: Callable[[BaseException], None]):
        self.pool, self.effects, self.max_running = pool, effects, max_running
        self.token_of, self.log, self.on_fatal = token_of, log, on_fatal
        self.world = len(pool.procs)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.cond = threading.Condition()
        self.profile: Profile | None = None
        self._stop_asked: threading.Event | None = None
        self._stop_result: tuple[bool, str] = (True, "")
        self.forward_ct = 0
        self.last_iteration = 0.0
        self.last_step_ms: list[float] = []
        self.closing = False

    # --- called from HTTP threads ---
    def submit(self, req: Request) -> None:
        with self.cond:
            self.waiting.append(req)
            self.cond.notify()

    def start_profile(self, body: dict) -> None:
        """Raises ProfileError with SGLang's message when a profile is already on, or the body is refused."""
        with self.cond:
            if self.profile is not None:
                raise ProfileError("Profiling is already in progress. Call /stop_profile first.")
            self.profile = Profile.from_request(body)
            self.cond.notify()
        self.log(f"Profiling starts. Traces will be saved to: {self.profile.output_dir} "
                 f"(with profile id: {self.profile.profile_id})")

    def stop_profile(self, timeout_s: float = 600.0) -> list[str]:
        """Stop the running profile now; the trace files written. Raises ProfileError."""
        done = threading.Event()
        with self.cond:
            if self.profile is None or not self.profile.active:
                raise ProfileError("Profiling is not in progress. Call /start_profile first.")
            self._stop_asked = done
            self.cond.notify()
        if not done.wait(timeout_s):
            raise ProfileError("the profile did not stop in time")
        ok, message = self._stop_result
        if not ok:
            raise ProfileError(message)
        return message.split("\n") if message else []

    def counts(self) -> dict:
        with self.cond:
            return {"running_requests": len(self.running), "waiting_requests": len(self.waiting),
                    "forward_ct": self.forward_ct, "last_step_ms": list(self.last_step_ms),
                    "profile_active": bool(self.profile and self.profile.active)}

    # --- the scheduler thread ---
    def run(self) -> None:
        try:
            while not self.closing:
                self._control()
                work = self._next()
                if work is None:
                    continue
                self._iteration(*work)
        except BaseException as exc:  # a rank died or a step failed: the server dies with it
            self._fail_all(f"{type(exc).__name__}: {exc}")
            self.on_fatal(exc)

    def _control(self) -> None:
        if self._stop_asked is not None:
            event, self._stop_asked = self._stop_asked, None
            try:
                files = self._profile_stop()
                self._stop_result = (True, "\n".join(files))
            except ProfileError as exc:
                self._stop_result = (False, str(exc))
            event.set()

    def _next(self) -> tuple[str, list[Request], list[int]] | None:
        """The next iteration (kind, its requests in batch order, the batch size of each step), or None
        after waiting a while for work."""
        with self.cond:
            room = self.max_running - len(self.running)
            for req in [r for r in self.waiting if r.prebuilt][:room]:
                self.waiting.remove(req)  # SGLang's PREBUILT: its KV came from the prefill server, no forward
                self.running.append(req)
                req.events.put(("tokens", len(req.output_ids)))
            room = self.max_running - len(self.running)
            new = list(self.waiting)[:room]
            for req in new:
                self.waiting.remove(req)
            if new:
                return "prefill", new, [len(new)]
            if self.running:
                left = [r.remaining for r in self.running]
                batches = [sum(1 for n in left if n > k) for k in range(self.effects.decode_steps)]
                return "decode", list(self.running), [b for b in batches if b]
            self.cond.wait(0.2)
            return None

    def _iteration(self, kind: str, reqs: list[Request], batches: list[int]) -> None:
        self._profile_before(kind)
        reply = self.pool.call({"op": "iterate", "kind": kind, "batches": batches,
                                "overhead_ms": self.effects.overhead_ms, "eager_ms": self.effects.eager_delay_ms})[0]
        self.forward_ct += len(batches)
        for seeds in reply["seeds"]:
            active = [r for r in reqs if r.remaining > 0]
            for req, seed in zip(active, seeds):
                req.output_ids.append(self.token_of(seed, len(req.output_ids)))
        now = time.perf_counter()
        with self.cond:
            self.last_iteration, self.last_step_ms = time.monotonic(), reply["step_ms"]
            if kind == "prefill":
                self.running += reqs
            for req in reqs:
                if req.remaining <= 0:
                    req.finished_at = now
                req.events.put(("done" if req.remaining <= 0 else "tokens", len(req.output_ids)))
            self.running = [r for r in self.running if r.remaining > 0]
        self._profile_after(len(batches))

    def _profile_before(self, kind: str) -> None:
        profile = self.profile
        if profile is None:
            return
        stop, start = profile.before(kind)
        if stop:
            self._profile_stop()
        if start:
            self.pool.call(profile.start_message())
            profile.started(kind)

    def _profile_after(self, steps: int) -> None:
        if self.profile is not None and self.profile.after(steps):
            self._profile_stop()

    def _profile_stop(self) -> list[str]:
        profile = self.profile
        if profile is None or not profile.active:
            raise ProfileError("Profiling is not in progress. Call /start_profile first.")
        replies = self.pool.call(profile.stop_message(self.world, self.effects.ep))
        files = [r["file"] for r in replies]
        profile.stopped(files)
        self.log(f"Profiling done. Traces are saved to: {profile.output_dir} ({', '.join(files)})")
        if profile.finished() or not profile.by_stage:
            with self.cond:
                self.profile = None
        return files

    def _fail_all(self, message: str) -> None:
        with self.cond:
            for req in list(self.waiting) + self.running:
                req.events.put(("error", message))
            self.waiting.clear()
            self.running = []
