"""The SGLang installed on this box: where it is, its version, and its own server-argument parser."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
from pathlib import Path

from .lean import lean


class NotInstalled(RuntimeError):
    """sglang cannot be found (or its server arguments cannot be imported) in this Python."""


def package_dir() -> Path:
    """The installed ``sglang`` package directory, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled("sglang is not installed in this Python (import sglang finds nothing)")
    return Path(list(spec.submodule_search_locations)[0])


def info() -> dict:
    """``{"version", "path"}`` of the SGLang read (the installed one, or the release tree release.activate put
    first), as every result reports it; ``shims`` when a placeholder stood in for a module (release.py)."""
    from .release import SHIMS

    result = {"version": version("sglang"), "path": str(package_dir())}
    if SHIMS:
        result["shims"] = list(SHIMS)
    return result


def version(distribution: str) -> str | None:
    """The installed version of a distribution (``sglang``, ``sglang-router``), or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def source(relative: str) -> Path:
    """A file of the installed SGLang, e.g. ``srt/environ.py``; NotInstalled when it is not there."""
    path = package_dir() / relative
    if not path.is_file():
        raise NotInstalled(f"the installed sglang has no {relative} ({path})")
    return path


class ParseError(Exception):
    """argparse's error, raised instead of printing usage and exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ParseError(message)


def server_parser() -> argparse.ArgumentParser:
    """SGLang's own server-argument parser: ``ServerArgs.add_cli_args`` on a parser made as its launcher makes it
    (sglang/srt/server_args.py ``prepare_server_args``: ``argparse.ArgumentParser(prog="sglang serve")``, so
    ``allow_abbrev`` is argparse's default, True, and a unique prefix of a flag is accepted as that flag)."""
    lean()
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError as exc:
        raise NotInstalled(f"sglang.srt.server_args cannot be imported: {exc}") from None
    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def router_parser() -> argparse.ArgumentParser:
    """The router's own parser, as ``sglang_router.launch_router.parse_router_args`` builds it (sglang-router
    0.3.2: ``RouterArgs.add_cli_args(parser, use_router_prefix=False)``), raising ParseError instead of exiting.
    NotInstalled when the ``sglang-router`` package is not in this Python."""
    try:
        from sglang_router.router_args import RouterArgs
    except ImportError as exc:
        raise NotInstalled(f"the sglang-router package cannot be imported: {exc}") from None
    parser = _Parser(prog="sglang_router.launch_router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser

