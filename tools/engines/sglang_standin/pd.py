"""Prefill/decode disaggregation for the SGLang stand-in server: what a prefill and a decode server do with
the requests SGLang's router sends them. A STAND-IN: no KV cache moves, and SGLang's transfer engines
(mooncake, nixl, ...) are not run; a small hand-off record crosses loopback HTTP instead.

What the router sends (observed from the installed ``sglang-router`` 0.3.2 in front of two logging servers;
field types as sgl-project/sglang ``sgl-model-gateway/src/routers/http/pd_types.rs`` ``RequestWithBootstrap``):
the client's ``/generate`` body goes to the prefill AND the decode server at once, with ``bootstrap_host``
(the prefill URL's host), ``bootstrap_port`` (the port given as ``--prefill URL PORT``, or null) and
``bootstrap_room`` (random, < 2**63) added; lists of them for a batch body. The client gets only the decode
server's response.

What SGLang 0.5.23 does with them, and what the stand-in does instead:

| SGLang 0.5.23 (installed source)                                   | the stand-in                                  |
|--------------------------------------------------------------------|-----------------------------------------------|
| no ``bootstrap_room`` on a disaggregated server -> 400, unless the  | same (``admit`` raises ``BadRequest``; the     |
| backend is ``fake`` (srt/managers/scheduler.py, "Disaggregated      | ``fake`` backend numbers rooms itself, as     |
| request received without bootstrap room id"; tokenizer_manager.py)  | tokenizer_manager.py's counter)               |
| ``bootstrap_port`` null -> the server's own                         | same                                          |
| ``--disaggregation-bootstrap-port`` (scheduler.py)                  |                                               |
| prefill runs a bootstrap server on that port (disaggregation/common/ | a stdlib HTTP server on that port: ``/health``|
| conn.py: ``/route``, ``/health``); decode finds the prefill ranks    | and ``/handoff/ROOM`` (stand-in only: the     |
| there and the KV moves rank to rank                                  | decode fetches the room's record)             |
| prefill computes the prompt and one token, transfers, then finishes  | ``handed_off`` publishes the room; the server |
| the request with length 0 (disaggregation/prefill.py)                | finishes it (``PREFILL_FINISH``)              |
| decode waits for the room's KV, then decodes (disaggregation/        | ``receive`` waits for the record, or raises   |
| decode.py); the ``fake`` backend's receiver succeeds at once         | ``TransferFailed``; ``fake``: no wait         |
| (disaggregation/fake/conn.py), and so does a request whose          | same (SGLang's warm-up request sends it)      |
| ``bootstrap_host`` is ``FAKE_BOOTSTRAP_HOST`` (disaggregation/utils.py|                                               |
| ``_is_fake_transfer``)                                               |                                               |

Hook for the stand-in's server (H2's files): ``role = role_for(server_args)`` at startup (None for
``--disaggregation-mode null``), ``role.stop()`` at exit, ``role.admit(body)`` before a request is
scheduled, then ``role.handed_off(ticket, ...)`` (prefill) or ``role.receive(ticket, timeout_s)`` (decode),
and ``role.server_info()`` merged into ``/get_server_info``.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib.util
import ipaddress
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAKE_BACKEND = "fake"
# How prefill.py finishes a handed-off request: FINISH_LENGTH(length=0).
PREFILL_FINISH = {"type": "length", "length": 0}
# A record nobody fetched (its decode request never came) is dropped after this long.
UNCLAIMED_TTL_S = 600.0


class BadRequest(ValueError):
    """A request this server must refuse with 400 (the message is SGLang's where SGLang has one)."""


class TransferFailed(RuntimeError):
    """The decode side did not get the room's hand-off: the request is aborted with this message."""


@dataclass(frozen=True)
class Ticket:
    """One request's place in the hand-off: the prefill server's bootstrap address and the room."""

    host: str
    port: int
    room: int
    fake: bool = False  # no transfer: the fake backend, or SGLang's FAKE_BOOTSTRAP_HOST (its warm-up)


class _Rooms:
    """Hand-off records by room, with waiting for one that has not arrived yet."""

    def __init__(self) -> None:
        self._records: dict[int, dict] = {}
        self._changed = threading.Condition()
        self.published = 0
        self.claimed = 0

    def publish(self, room: int, record: dict) -> None:
        with self._changed:
            now = time.time()
            for old in [r for r, rec in self._records.items() if now - rec["handed_off_at"] > UNCLAIMED_TTL_S]:
                del self._records[old]
            self._records[room] = record
            self.published += 1
            self._changed.notify_all()

    def claim(self, room: int, wait_s: float) -> dict | None:
        deadline = time.monotonic() + wait_s
        with self._changed:
            while room not in self._records:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            self.claimed += 1
            return self._records.pop(room)


def _handler(rooms: _Rooms, max_wait_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path, _, query = self.path.partition("?")
            if path == "/health":
                return self._reply(200, {"ok": True, "server": "stand-in bootstrap"})
            if path.startswith("/handoff/"):
                return self._handoff(path.removeprefix("/handoff/"), query)
            return self._reply(404, {"error": f"no route {path} on the stand-in's bootstrap server"})

        def _handoff(self, room_text: str, query: str) -> None:
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            try:
                room = int(room_text)
                wait_s = min(float(params.get("wait_s", "0")), max_wait_s)
            except ValueError:
                return self._reply(400, {"error": f"bad room or wait_s in {self.path}"})
            record = rooms.claim(room, wait_s)
            if record is None:
                return self._reply(404, {"error": f"room {room} was not handed off within {wait_s:g} s"})
            return self._reply(200, record)

        def _reply(self, status: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # the server log is the stand-in's, not per request
            pass

    return Handler


@functools.cache
def fake_bootstrap_host() -> str:
    """SGLang's FAKE_BOOTSTRAP_HOST, read from the installed disaggregation/utils.py by ``ast`` (importing that
    module drags in the model configs, and with them torchvision, which a CPU box lacks)."""
    spec = importlib.util.find_spec("sglang")
    path = Path(list(spec.submodule_search_locations)[0]) / "srt" / "disaggregation" / "utils.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FAKE_BOOTSTRAP_HOST" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"FAKE_BOOTSTRAP_HOST is not assigned in {path}")


def _arg(server_args: Any, name: str) -> Any:
    """A disaggregation setting from SGLang's parsed ServerArgs (flat in 0.5.23; ``disagg`` namespace else)."""
    if hasattr(server_args, name):
        return getattr(server_args, name)
    return getattr(server_args.disagg, name)


class Role:
    """A disaggregated stand-in's side of the hand-off. ``mode`` is "prefill" or "decode"."""

    def __init__(self, mode: str, backend: str, bootstrap_port: int, host: str, max_wait_s: float = 300.0):
        self.mode = mode
        self.backend = backend
        self.bootstrap_port = bootstrap_port
        self.host = host
        self.max_wait_s = max_wait_s
        self._rooms = _Rooms()
        self._fake_rooms = itertools.count()
        self._server: ThreadingHTTPServer | None = None
        self.admitted = 0
        self.received = 0
        self.receive_wait_s = 0.0

    def start(self) -> None:
        """Prefill: serve the bootstrap port (fails loudly if it is taken, as SGLang's server would)."""
        if self.mode != "prefill":
            return
        self._server = ThreadingHTTPServer((self.host, self.bootstrap_port), _handler(self._rooms, self.max_wait_s))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="standin-bootstrap", daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def admit(self, body: dict, index: int | None = None) -> Ticket:
        """The request's ticket from its bootstrap fields (``index``: the item of a batch body).

        Raises BadRequest where SGLang refuses the request."""
        host, port, room = (body.get(k) for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room"))
        if index is not None:
            host, port, room = (v[index] if isinstance(v, list) else v for v in (host, port, room))
        if room is None:
            if self.backend != FAKE_BACKEND:
                raise BadRequest("Invalid request: Disaggregated request received without bootstrap room id.")
            room = next(self._fake_rooms)
        if not isinstance(room, int) or isinstance(room, bool) or room < 0:
            raise BadRequest(f"bootstrap_room must be a non-negative integer, got {room!r}")
        self.admitted += 1
        fake = self.backend == FAKE_BACKEND or host == fake_bootstrap_host()
        return Ticket(host=str(host or "127.0.0.1"), port=int(port if port is not None else self.bootstrap_port),
                      room=room, fake=fake)

    def handed_off(self, ticket: Ticket, prompt_tokens: int, first_token_id: int) -> None:
        """Prefill: the prompt was computed and its first token sampled; the decode side may take it."""
        if self.mode != "prefill":
            raise RuntimeError("handed_off is the prefill server's step")
        if ticket.fake:
            return
        self._rooms.publish(ticket.room, {"room": ticket.room, "prompt_tokens": prompt_tokens,
                                          "first_token_id": first_token_id, "handed_off_at": time.time()})

    def receive(self, ticket: Ticket, timeout_s: float) -> dict:
        """Decode: the room's hand-off record from the prefill server named by the ticket (blocks).

        A fake ticket does not wait (SGLang's fake receiver succeeds at once): ``first_token_id`` is None."""
        if self.mode != "decode":
            raise RuntimeError("receive is the decode server's step")
        if ticket.fake:
            return {"room": ticket.room, "prompt_tokens": None, "first_token_id": None, "waited_s": 0.0}
        started = time.monotonic()
        url = f"http://{_url_host(ticket.host)}:{ticket.port}/handoff/{ticket.room}?wait_s={timeout_s:g}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s + 10) as response:
                record = json.load(response)
        except urllib.error.HTTPError as err:
            raise TransferFailed(f"KV hand-off for room {ticket.room} from {ticket.host}:{ticket.port} failed: "
                                 f"{_error_text(err)}") from err
        except OSError as err:
            raise TransferFailed(f"KV hand-off for room {ticket.room}: cannot reach the prefill server's "
                                 f"bootstrap port {ticket.host}:{ticket.port}: {err}") from err
        waited = time.monotonic() - started
        self.received += 1
        self.receive_wait_s += waited
        return {**record, "waited_s": waited}

    async def receive_async(self, ticket: Ticket, timeout_s: float) -> dict:
        """``receive`` for an asyncio server: the wait runs in a worker thread."""
        return await asyncio.to_thread(self.receive, ticket, timeout_s)

    def server_info(self) -> dict:
        """Fields for /get_server_info: the role, the backend, and what crossed the hand-off so far."""
        info = {"disaggregation_mode": self.mode, "disaggregation_transfer_backend": self.backend,
                "disaggregation_bootstrap_port": self.bootstrap_port, "pd_requests_admitted": self.admitted}
        if self.mode == "prefill":
            info.update(pd_rooms_handed_off=self._rooms.published, pd_rooms_claimed=self._rooms.claimed)
        else:
            info.update(pd_rooms_received=self.received, pd_receive_wait_s=round(self.receive_wait_s, 6))
        return info


def _url_host(host: str) -> str:
    try:
        ipaddress.IPv6Address(host.strip("[]"))
        return f"[{host.strip('[]')}]"
    except ValueError:
        return host


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        return json.loads(err.read() or b"{}").get("error") or f"HTTP {err.code}"
    except ValueError:
        return f"HTTP {err.code}"


def role_for(server_args: Any) -> Role | None:
    """The started Role for SGLang's parsed ServerArgs, or None when the server is not disaggregated."""
    mode = _arg(server_args, "disaggregation_mode")
    if mode in (None, "null"):
        return None
    role = Role(mode=mode, backend=_arg(server_args, "disaggregation_transfer_backend"),
                bootstrap_port=int(_arg(server_args, "disaggregation_bootstrap_port")),
                host=getattr(server_args, "host", None) or "127.0.0.1")
    role.start()
    return role
