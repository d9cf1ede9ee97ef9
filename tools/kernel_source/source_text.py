"""Source text of AST nodes, and the one spelling of an expression that pinned shapes are keyed by."""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=16)
def _encoded_lines(source: str) -> tuple[bytes, ...]:
    return tuple(line.encode() for line in source.splitlines(keepends=True))


def segment(source: str, node: ast.AST) -> str:
    """The source text of ``node`` (as ast.get_source_segment, without re-splitting the file each call)."""
    lines = _encoded_lines(source)
    try:
        first, last = node.lineno - 1, node.end_lineno - 1
        start, end = node.col_offset, node.end_col_offset
    except AttributeError:  # a node without a position (built, not parsed): its unparsed text
        return ast.unparse(node)
    if end is None or last >= len(lines):
        return ast.unparse(node)
    if first == last:
        return lines[first][start:end].decode()
    parts = [lines[first][start:]] + list(lines[first + 1:last]) + [lines[last][:end]]
    return b"".join(parts).decode()


def normalize_key(text: str) -> str:
    """Expression text in ast.unparse's spelling, so 'q.shape[ 0 ]' and "q.shape[0]" match."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError:  # not an expression: the text itself is the key
        return text.strip()
