"""The process exit codes, one per outcome, the same in every subcommand (docs/usage.md, "Exit codes and errors").

Scripts branch on these, so they are a contract: a run that stops for a decision is not a finished
run, and an interrupted one is neither a failure of the code nor of the input.
"""

from __future__ import annotations

DONE = 0
FAILED = 1  # the run or the tool failed, or a replay diverged
BAD_INPUT = 2  # the user must fix the command line, the target or the run named
AWAITING_DECISION = 3  # the run stopped at the options step: resume it with --decide
INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as shells report it

# Outcome statuses (agent.runner.Outcome.status) -> exit code.
_BY_STATUS = {
    "done": DONE,
    "failed": FAILED,
    "diverged": FAILED,
    "bad-input": BAD_INPUT,
    "awaiting-decision": AWAITING_DECISION,
    "interrupted": INTERRUPTED,
}

TABLE = [  # (code, outcome) as docs/usage.md documents them
    (DONE, "done: the run finished (or the command did what it was asked)"),
    (FAILED, "failed: a step or tool failed, or a replay diverged"),
    (BAD_INPUT, "bad input: the command line, the target or the named run is unusable"),
    (AWAITING_DECISION, "awaiting a decision: the run stopped at the options step"),
    (INTERRUPTED, "interrupted: Ctrl-C"),
]


def for_status(status: str) -> int:
    """The exit code of an outcome status; an unknown status is a failure, never success."""
    return _BY_STATUS.get(status, FAILED)
