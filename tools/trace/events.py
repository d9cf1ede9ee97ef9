"""Streaming readers for Chrome trace files (PyTorch profiler / Kineto output), plain or gzip.

The text is read in chunks, so memory stays at a chunk or two whatever the file's size, and any
JSON layout (Kineto's indented output, SGLang's one-line merged files, the bare-array Chrome form)
reads the same. Two readers share that skeleton:

- ``iter_events``: every element of ``traceEvents`` as a dict, decoded one by one by the standard
  library's C JSON scanner (exact, generic);
- ``iter_record_batches``: lists of ``EventRecord`` (the few fields the analysis reads), a chunk at
  a time by msgspec, which skips the other fields without building them: about 2.5x faster. A
  batch that msgspec does not accept whole is read by the exact scanner instead.

benchmarks/trace_parse.py measures them against ijson's ``items`` on the same ~1 GB file.
"""

from __future__ import annotations

import gzip
import io
import json
import json.scanner
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec

CHUNK_CHARS = 1 << 22
# A single event this large means a malformed file rather than a real event; stop growing the buffer.
MAX_ELEMENT_CHARS = 1 << 26

_GZIP_MAGIC = b"\x1f\x8b"
_WS = re.compile(r"[ \t\n\r]*")
_WHITESPACE = frozenset(" \t\n\r")
_DELIMITERS = frozenset(",]}:")
_NEXT_ELEMENT = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_decode = json.JSONDecoder().raw_decode
# The C scanner raw_decode wraps, called directly: one Python frame less per event.
_scan_once = json.scanner.make_scanner(json.JSONDecoder())


class TraceFormatError(ValueError):
    """The file is not a readable Chrome trace (bad JSON, truncated, or not a trace at all)."""


def open_text(path: str | Path) -> TextIO:
    """Open a trace as text, decompressing gzip whatever the file's suffix says."""
    raw = open(path, "rb")
    try:
        magic = raw.read(2)
        raw.seek(0)
    except BaseException:
        raw.close()
        raise
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="rb"), encoding="utf-8")
    return io.TextIOWrapper(raw, encoding="utf-8")


class _Chunks:
    """A window on the text: ``buf[pos:]`` is what has been read and not yet consumed; ``base`` is
    the offset of ``buf[0]`` in the whole text; ``array_ended`` is set when the events array's
    closing bracket has been consumed."""

    __slots__ = ("_file", "_path", "buf", "pos", "base", "eof", "array_ended")

    def __init__(self, file: TextIO, path: str):
        self._file = file
        self._path = path
        self.buf = ""
        self.pos = 0
        self.base = 0
        self.eof = False
        self.array_ended = False

    def _read(self, n: int) -> str:
        try:
            return self._file.read(n)
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"{self._path}: cannot read: {exc}") from exc

    def fill(self) -> bool:
        """Read more text after ``buf[pos:]``; False at end of file."""
        if self.eof:
            return False
        pending = len(self.buf) - self.pos
        if pending > MAX_ELEMENT_CHARS:
            raise TraceFormatError(f"{self._path}: malformed JSON (no complete event within {MAX_ELEMENT_CHARS} characters)")
        more = self._read(max(CHUNK_CHARS, pending))
        if not more:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos :] + more
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of file), leaving ``pos`` on it."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise TraceFormatError(f"{self._path}: expected one of {chars!r}, found {c or 'end of file'!r}")
        self.pos += 1
        return c

    def value(self) -> Any:
        """Decode one JSON value at ``pos``."""
        self.peek()
        while True:
            try:
                obj, end = _decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.fill():
                    continue
                raise TraceFormatError(f"{self._path}: {exc}") from exc
            # A number cut by the chunk's end ("12" of "12.5") decodes as a shorter one: trust a
            # value only once what follows it is a delimiter, or the text ends.
            after = _WS.match(self.buf, end).end()
            if (after >= len(self.buf) or self.buf[after] not in _DELIMITERS) and end + 64 >= len(self.buf) and self.fill():
                continue
            self.pos = end
            return obj


def _array_elements(src: _Chunks, stop: int | None = None) -> Iterator[Any]:
    """Yield the events array's elements from ``pos`` (at an element, or at the ']' of an empty
    array) until its ']' (consumed, ``src.array_ended`` set) or, with ``stop``, until an element
    that starts at or after that offset of the text (left unread)."""
    if src.peek() == "]":
        src.pos += 1
        src.array_ended = True
        return
    limit = -1 if stop is None else stop
    buf, pos, size, base = src.buf, src.pos, len(src.buf), src.base
    skip_ws = _WS.match
    next_element = _NEXT_ELEMENT.match
    whitespace = _WHITESPACE
    scan = _scan_once
    while True:
        # Here pos is at (or whitespace before) an element.
        if pos < size and buf[pos] in whitespace:
            pos = skip_ws(buf, pos).end()
        if pos >= size:
            src.buf, src.pos = buf, pos
            if not src.fill():
                raise TraceFormatError(f"{src._path}: truncated inside traceEvents")
            buf, pos, size, base = src.buf, src.pos, len(src.buf), src.base
            continue
        if 0 <= limit <= base + pos:
            src.buf, src.pos = buf, pos
            return
        try:
            obj, end = scan(buf, pos)
        except (json.JSONDecodeError, StopIteration) as exc:
            # Most often an event cut by the chunk's end: read on and decode it again.
            src.buf, src.pos = buf, pos
            if not src.fill():
                detail = exc if isinstance(exc, json.JSONDecodeError) else f"invalid or truncated JSON at character {base + pos}"
                raise TraceFormatError(f"{src._path}: {detail}") from None
            buf, pos, size, base = src.buf, src.pos, len(src.buf), src.base
            continue
        if type(obj) is not dict:
            # Only a scalar can be cut short by the chunk's end (objects end with their brace):
            # decode it again once what follows it has been read.
            src.buf, src.pos = buf, pos
            obj = src.value()
            buf, end, size, base = src.buf, src.pos, len(src.buf), src.base
        yield obj
        separator = next_element(buf, end)
        if separator is not None and separator.end() < size:
            pos = separator.end()
            continue
        # Slow path: the separator is cut by the chunk's end, or this was the last element.
        src.buf, src.pos = buf, end
        if src.expect(",]") == "]":
            src.array_ended = True
            return
        buf, pos, size, base = src.buf, src.pos, len(src.buf), src.base


class EventArgs(msgspec.Struct, gc=False):
    """The one field of an event's ``args`` the analysis reads."""

    correlation: int = -1


class EventRecord(msgspec.Struct, gc=False):
    """The fields of a trace event the analysis reads (the rest of the event is not decoded)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: EventArgs | None = None


_BATCH_DECODER = msgspec.json.Decoder(list[EventRecord])
_SEPARATOR_THEN_OBJECT = re.compile(r"[ \t\n\r]*,[ \t\n\r]*\{")


def record_from_dict(event: dict) -> EventRecord:
    """The EventRecord of an event decoded as a dict (values are taken as they are, unchecked)."""
    args = event.get("args")
    return EventRecord(
        ph=event.get("ph", ""),
        cat=event.get("cat", ""),
        name=event.get("name", ""),
        pid=event.get("pid"),
        tid=event.get("tid"),
        ts=event.get("ts"),
        dur=event.get("dur"),
        args=EventArgs(correlation=args.get("correlation", -1)) if isinstance(args, dict) else None,
    )


def _batch_cut(buf: str, pos: int) -> tuple[int, int] | None:
    """The last place in the buffer after ``pos`` that looks like a boundary between events ("}"
    then "," then "{"): (end of the batch, start of the next element); None when there is none."""
    end = len(buf)
    while True:
        end = buf.rfind("}", pos, end)
        if end < 0:
            return None
        match = _SEPARATOR_THEN_OBJECT.match(buf, end + 1)
        if match is not None:
            return end + 1, match.end() - 1


def _array_record_batches(src: _Chunks) -> Iterator[list[EventRecord]]:
    """The events array from ``pos`` to its ']' (consumed) as lists of EventRecord."""
    if src.peek() == "]":
        src.pos += 1
        src.array_ended = True
        return
    decode = _BATCH_DECODER.decode
    while not src.array_ended:
        if src.peek() == "":
            raise TraceFormatError(f"{src._path}: truncated inside traceEvents")
        buf, pos, base = src.buf, src.pos, src.base
        cut = _batch_cut(buf, pos)
        if cut is None and src.fill():
            continue  # the buffer holds part of one element: read on
        if cut is not None:
            end, following = cut
            try:
                batch = decode("[" + buf[pos:end] + "]")
            except msgspec.MsgspecError:
                batch = None  # not a boundary after all, or values of other types: read exactly below
            if batch is not None:
                src.pos = following
                yield batch
                continue
            exact_stop = base + following
        else:
            exact_stop = base + pos + 1  # the last element of the text: just this one
        yield [record_from_dict(e) for e in _array_elements(src, exact_stop) if type(e) is dict]


def _iter_array(path: str | Path, metadata: dict | None, elements) -> Iterator:
    """The file skeleton both readers share: header keys, the events array read by ``elements``
    (a generator over the array from its first element), the keys after it."""
    path = str(path)
    if metadata is None:
        metadata = {}
    try:
        file = open_text(path)
    except OSError as exc:
        raise TraceFormatError(f"{path}: {exc.strerror or exc}") from exc
    with file:
        src = _Chunks(file, path)
        try:
            first = src.peek()
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"{path}: not UTF-8 text") from exc
        if first == "[":
            src.pos += 1
            yield from elements(src)
            if src.peek() != "":
                raise TraceFormatError(f"{path}: text after the events array")
            return
        if first != "{":
            raise TraceFormatError(f"{path}: not a Chrome trace (starts with {first or 'nothing'!r})")
        src.pos += 1
        seen_events = False
        if src.peek() == "}":
            src.pos += 1
        else:
            while True:
                key = src.value()
                if not isinstance(key, str):
                    raise TraceFormatError(f"{path}: object key is not a string")
                src.expect(":")
                if key == "traceEvents" and src.peek() == "[":
                    src.pos += 1
                    seen_events = True
                    yield from elements(src)
                else:
                    metadata[key] = src.value()
                if src.expect(",}") == "}":
                    break
        if not seen_events:
            raise TraceFormatError(f"{path}: no traceEvents array")


def iter_events(path: str | Path, metadata: dict | None = None) -> Iterator[Any]:
    """Yield each element of a Chrome trace's ``traceEvents`` (event objects as dicts), in file
    order, streaming, decoded exactly by the standard library.

    Top-level keys other than ``traceEvents`` (``distributedInfo``, ``deviceProperties``, ...) are
    stored into ``metadata`` when given: those before the events are there once the first event is
    yielded, the rest once the generator is exhausted. Raises TraceFormatError for anything that
    is not a complete Chrome trace.
    """
    return _iter_array(path, metadata, _array_elements)


def iter_record_batches(path: str | Path, metadata: dict | None = None) -> Iterator[list[EventRecord]]:
    """Like iter_events, but yields lists of EventRecord (only the fields the analysis reads),
    decoded a chunk at a time by msgspec, which skips every other field. Elements that are not
    objects are left out. Each batch ends at a guessed event boundary and is kept only if msgspec
    decodes it whole as a list of events, which a batch cut inside an event cannot be; a batch that
    does not decode (or has fields of other types) is read by the exact decoder instead, so the
    records are those of iter_events either way."""
    return _iter_array(path, metadata, _array_record_batches)
