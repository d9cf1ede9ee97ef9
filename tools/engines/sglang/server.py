"""Launch and stop SGLang servers (or the stand-in): a process group each, a free port, /health, the log kept.

Every server runs under guard.py as the leader of its own session: the adapter stops a server by SIGTERM to
the group, then SIGKILL to the group after a grace; at exit (atexit), on SIGTERM/SIGINT/SIGHUP (handlers
installed by ``install_handlers``), and when the adapter is killed outright (the guard's death pipe) every
group it started goes the same way.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

GUARD = Path(__file__).with_name("guard.py")
EXCERPT_LINES = 40
# What a server log says when it ran out of device memory (torch's "CUDA out of memory", its OutOfMemoryError,
# NCCL's and the allocator's wording) or failed with a Python exception.
OOM = re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory", re.IGNORECASE)
TRACEBACK = "Traceback (most recent call last)"

_LIVE: set["Server"] = set()
_DEATH_PIPE: list[int] = []  # [read end]; the write end stays open in this process only, never inherited


class RunFailed(Exception):
    """One run failed; ``kind`` is its record's kind, the message its one-line error."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _death_pipe_read_end() -> int:
    if not _DEATH_PIPE:
        read_end, _write_end = os.pipe()  # both close-on-exec; the guard gets the read end through pass_fds
        _DEATH_PIPE.append(read_end)
    return _DEATH_PIPE[0]


class Server:
    """One launched server: its guard's Popen (pid = pgid), URL, log path."""

    def __init__(self, proc: subprocess.Popen, host: str, port: int, log_path: Path, grace_s: float):
        self.proc, self.host, self.port, self.log_path, self.grace_s = proc, host, port, log_path, grace_s
        self.stopped = False
        self.ready_at = 0  # the log's length when the server became healthy: what it logs under load starts there

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @classmethod
    def launch(cls, launcher: list[str], args: list[str], env: dict[str, str], host: str, log_path: Path,
               grace_s: float) -> "Server":
        """Start ``launcher + args + --host H --port P`` (P free) under a guard, output to ``log_path``."""
        port = free_port(host)
        argv = [*launcher, *args, "--host", host, "--port", str(port)]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        read_end = _death_pipe_read_end()
        with open(log_path, "ab") as log:
            log.write(f"# launched: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen([sys.executable, str(GUARD), str(read_end), str(grace_s), "--", *argv],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, pass_fds=(read_end,))
        server = cls(proc, host, port, log_path, grace_s)
        _LIVE.add(server)
        return server

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _get(self, route: str) -> bool:
        try:
            with urllib.request.urlopen(self.url + route, timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until /health and /get_model_info answer 200; RunFailed (launch_failed, oom, timeout)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not self.alive():
                kind = "oom" if self.log_says_oom() else "launch_failed"
                raise RunFailed(kind, f"the server exited with status {self.proc.returncode} before it was healthy"
                                      f"{': ' + self.last_error() if self.last_error() else ''}")
            if self._get("/health") and self._get("/get_model_info"):
                self.ready_at = len(self.log_text())
                return time.monotonic() - start
            time.sleep(0.25)
        raise RunFailed("timeout", f"the server was not healthy (/health, /get_model_info) within {timeout_s:g} s")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_says_oom(self, since_ready: bool = False) -> bool:
        return bool(OOM.search(self.log_text()[self.ready_at if since_ready else 0:]))

    def log_has_traceback(self, since_ready: bool = False) -> bool:
        """A traceback in the log (since the server became healthy: one logged while starting that did not stop
        it, e.g. an optional import SGLang reports and goes on without, is not a failure of the run)."""
        return TRACEBACK in self.log_text()[self.ready_at if since_ready else 0:]

    def last_error(self) -> str:
        """The last line of the log that names an error (an exception line after a traceback), or ''."""
        lines = [line.strip() for line in self.log_text().splitlines() if line.strip()]
        named = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b", line) or OOM.search(line)]
        return named[-1][:300] if named else ""

    def excerpt(self) -> str:
        return "\n".join(self.log_text().splitlines()[-EXCERPT_LINES:])

    def stop(self) -> int | None:
        """SIGTERM to the group, SIGKILL to the group after the grace (also to what the server left behind);
        returns the guard's exit status (the server's), None if it had to be killed."""
        if self.stopped:
            return self.proc.returncode
        self.stopped = True
        pgid = self.proc.pid
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(pgid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self)
        return self.proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


def _on_signal(signum, _frame):
    stop_all()
    raise SystemExit(128 + signum)


def install_handlers() -> None:
    """Stop every server this process started on exit and on SIGTERM, SIGINT and SIGHUP."""
    atexit.register(stop_all)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
