"""The stand-in's HTTP routes, answered as sglang 0.5.23's srt/entrypoints/http_server.py answers them.

Stdlib http.server, one thread per connection, HTTP/1.1 with keep-alive; streams are chunked
``text/event-stream`` bodies of ``data: {...}\\n\\n`` events and a last ``data: [DONE]\\n\\n``, as SGLang's
StreamingResponse sends them. ROUTES maps (method, path) to a handler; tests/test_sglang_standin_routes.py
reads it.
"""

from __future__ import annotations

import json
import queue
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import generate
from .profiling import ProfileError
from .replies import Reply, Stream

# /health and /health_generate wait this long for an iteration (SGLang's HEALTH_CHECK_TIMEOUT is 20 s).
HEALTH_TIMEOUT_S = 20.0


def _health(app, _body, path: str):
    if app.status != "Up":
        return Reply(b"", HTTPStatus.SERVICE_UNAVAILABLE)
    if path == "/health" and not app.health_generates:
        return Reply(b"")
    # SGLang's health_generate: one token through the scheduler, or any iteration seen since the call.
    tic = time.monotonic()
    req = app.scheduler_request(prompt_len=1, max_new_tokens=1)
    while time.monotonic() < tic + HEALTH_TIMEOUT_S:
        try:
            kind, _ = req.events.get(timeout=0.5)
            if kind == "error":
                break
            if kind == "done":
                return Reply(b"")
        except queue.Empty:
            if app.scheduler.last_iteration > tic:
                return Reply(b"")
    return Reply(b"", HTTPStatus.SERVICE_UNAVAILABLE)


def _ready(app, _body, _path):
    return Reply(b"", 200 if app.status == "Up" else HTTPStatus.SERVICE_UNAVAILABLE)


def _model_info(app, _body, _path):
    return Reply(app.model_info())


def _server_info(app, _body, _path):
    return Reply(app.server_info())


def _models(app, _body, _path):
    name = app.model_name
    return Reply({"object": "list", "data": [{"id": name, "object": "model", "created": int(app.started),
                                              "owned_by": "sglang", "root": name, "parent": None,
                                              "max_model_len": app.context_len, "server": "stand-in"}]})


def _flush_cache(app, _body, _path):
    counts = app.scheduler.counts()
    if counts["running_requests"] or counts["waiting_requests"]:
        return Reply("Flush cache failed.\n", HTTPStatus.BAD_REQUEST)
    return Reply("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
                 "requests, the operation will not be performed.)\n")


def _start_profile(app, body, _path):
    try:
        app.scheduler.start_profile(body or {})
    except ProfileError as exc:
        return Reply(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR)
    return Reply("Start profiling.\n")


def _stop_profile(app, _body, _path):
    try:
        app.scheduler.stop_profile()
    except ProfileError as exc:
        return Reply(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR)
    return Reply("Stop profiling. This will take some time.\n")


def _generate(app, body, _path):
    return generate.native(app, body)


def _completions(app, body, _path):
    return generate.completions(app, body)


def _chat(app, body, _path):
    return generate.chat(app, body)


ROUTES = {
    ("GET", "/health"): _health, ("GET", "/health_generate"): _health,
    ("GET", "/ready"): _ready,
    ("GET", "/get_model_info"): _model_info, ("GET", "/model_info"): _model_info,
    ("GET", "/get_server_info"): _server_info, ("GET", "/server_info"): _server_info,
    ("GET", "/v1/models"): _models,
    ("POST", "/generate"): _generate, ("PUT", "/generate"): _generate,
    ("POST", "/v1/completions"): _completions,
    ("POST", "/v1/chat/completions"): _chat,
}
for _method in ("GET", "POST"):
    ROUTES[(_method, "/flush_cache")] = _flush_cache
    ROUTES[(_method, "/start_profile")] = _start_profile
    ROUTES[(_method, "/stop_profile")] = _stop_profile


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglang-standin"

    def log_message(self, format, *args):  # noqa: A002 -- http.server's signature; requests are not logged
        pass

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("PUT")

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        return json.loads(raw)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        app = self.server.app
        handler = ROUTES.get((method, url.path)) or app.extra_routes.get((method, url.path))
        try:
            body = self._body()
        except (ValueError, UnicodeDecodeError) as exc:
            self._send(Reply({"error": f"bad JSON body: {exc}"}, HTTPStatus.BAD_REQUEST))
            return
        if handler is None:
            self._send(Reply({"detail": "Not Found"}, HTTPStatus.NOT_FOUND))
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if query and (body is None or isinstance(body, dict)):
            body = {**query, **(body or {})}
        try:
            out = handler(app, body, url.path)
        except Exception:  # the request fails, the server stays up (FastAPI answers 500 the same way)
            traceback.print_exc()
            out = Reply("Internal Server Error", HTTPStatus.INTERNAL_SERVER_ERROR)
        if isinstance(out, Stream):
            self._stream(out)
        else:
            self._send(out)

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, stream: Stream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in stream.events:
                self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, app):
        super().__init__(address, _Handler)
        self.app = app
