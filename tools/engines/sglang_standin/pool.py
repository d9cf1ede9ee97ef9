"""The server's side of the rank processes: start them, send each message to all, gather every answer."""

from __future__ import annotations

import json
import multiprocessing as mp
import tempfile
import time

from . import ranks


class RankDied(RuntimeError):
    """A rank failed or exited; the message names it and its error, ``detail`` holds its traceback."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def start_method(spec_json: str) -> str:
    """``fork`` where the ranks run on the CPU: they take the server's imports (torch, which SGLang's parser had
    already imported) instead of importing them again each (some 12 s of a 2-core box a launch at TP4), as
    PyTorch's own DataLoader workers do; ``spawn`` where a rank may use CUDA, which a child forked after its
    parent touched CUDA cannot initialize (and SGLang spawns its scheduler processes)."""
    device = json.loads(spec_json).get("device", "auto")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return "fork" if device == "cpu" else "spawn"


class RankPool:
    """``world`` rank processes (ranks.rank_main), in the server's process group (so a kill of the group
    takes them), each killed by the kernel when the server dies (PR_SET_PDEATHSIG)."""

    def __init__(self, world: int, spec_json: str):
        ctx = mp.get_context(start_method(spec_json))
        self._init_dir = tempfile.TemporaryDirectory(prefix="sglang-standin-ranks-")
        self.conns, self.procs = [], []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=ranks.rank_main, args=(rank, world, spec_json, child, self._init_dir.name),
                               name=f"standin-rank-{rank}", daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def _recv(self, rank: int, timeout_s: float | None) -> dict:
        conn, proc = self.conns[rank], self.procs[rank]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not conn.poll(1.0):
            # any rank, not only this one: a rank blocked in a collective waits for a peer that died
            for other, peer in enumerate(self.procs):
                if not peer.is_alive():
                    self._raise_dead(other)
            if deadline is not None and time.monotonic() > deadline:
                raise RankDied(f"rank {rank} (pid {proc.pid}) did not answer within {timeout_s:.0f} s")
        try:
            reply = conn.recv()
        except EOFError:
            proc.join(5.0)  # its pipe closed: it is exiting
            raise RankDied(f"rank {rank} (pid {proc.pid}) exited with code {proc.exitcode}") from None
        if not reply.get("ok"):
            raise RankDied(f"rank {rank}: {reply.get('error')}", reply.get("traceback", ""))
        return reply

    def _raise_dead(self, rank: int) -> None:
        """Raise RankDied for a rank process that exited: with its error when it sent one."""
        proc, conn = self.procs[rank], self.conns[rank]
        try:
            reply = conn.recv() if conn.poll() else None
        except EOFError:
            reply = None
        if reply is not None and not reply.get("ok"):
            raise RankDied(f"rank {rank}: {reply.get('error')}", reply.get("traceback", ""))
        raise RankDied(f"rank {rank} (pid {proc.pid}) exited with code {proc.exitcode}")

    def ready(self, timeout_s: float) -> list[dict]:
        """Every rank's ready record (pid, device, shapes), in rank order."""
        return [self._recv(rank, timeout_s) for rank in range(len(self.procs))]

    def call(self, msg: dict) -> list[dict]:
        """Send ``msg`` to every rank, then every answer in rank order; raises RankDied."""
        for conn in self.conns:
            conn.send(msg)
        return [self._recv(rank, None) for rank in range(len(self.procs))]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self, grace_s: float = 5.0) -> None:
        """Ask every rank to exit, then kill the ones still alive after ``grace_s``."""
        for conn in self.conns:
            try:
                conn.send({"op": "exit"})
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        self._init_dir.cleanup()
