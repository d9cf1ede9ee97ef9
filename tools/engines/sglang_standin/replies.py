"""A handler's answer: a whole response, or a stream of server-sent events."""

from __future__ import annotations

import json


class Reply:
    """A whole response: status, body (bytes, or JSON-able), content type."""

    def __init__(self, body, status: int = 200, content_type: str | None = None):
        self.status = status
        if isinstance(body, (bytes, str)):
            self.body = body.encode() if isinstance(body, str) else body
            self.content_type = content_type or "text/plain; charset=utf-8"
        else:
            self.body = json.dumps(body).encode()
            self.content_type = content_type or "application/json"


class Stream:
    """A streamed response: ``events`` yields JSON-able objects, each sent as one SSE event."""

    def __init__(self, events):
        self.events = events
