"""What is checked before a run exists: the box can be reached and surveyed, and it can run the
target (the reference engine's torch and kernel source; an SGLang target's arguments, checked by the
box's own SGLang). A problem is BadInput: one line each, exit 2, and no run directory."""

from __future__ import annotations

from agent.box.catalog import run_tool
from agent.box.interface import Box
from agent.box.ssh_client import BoxUnreachable
from agent.config import Target
from agent.engines import engine_for


class BadInput(Exception):
    """Input the user must fix; one line."""


def preflight(target: Target, box: Box) -> None:
    """Check, before any run exists, that the box can be reached and can run this target at all (an
    SSH box says everything its host lacks in one line; an SGLang target's server arguments and
    environment levers are checked against the box's installed SGLang, a line per problem). Raises
    BadInput."""
    blockers = getattr(box, "blockers", None)
    try:
        lacking = blockers() if blockers is not None else None
        if lacking:
            raise BadInput(lacking)
        record, raw = run_tool(box, "box.survey", {})
    except BoxUnreachable as exc:
        raise BadInput(f"the box cannot be reached: {exc}") from None
    raw.cleanup()
    if not record["ok"]:
        raise BadInput(f"the box cannot be surveyed: {record['error']}")
    # the engine's own checks: a server's arguments and environment levers, on the box; the reference
    # engine's torch and kernel source
    problems = engine_for(target).box_problems(target, box, record["data"])
    if problems:
        raise BadInput("; ".join(problems))
