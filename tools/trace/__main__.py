"""Box-side: ``python -m tools.trace FILE... [--by-rank] [--by-op] [--categories FILE]`` prints one JSON object
(``--by-op``: tools.trace.ops.attribute's, kernel time by launching frame, instead of the summary).

Exit 0 with the summary on stdout; 2 on bad input (unreadable or malformed trace, conflicting
ranks...) with a one-line message on stderr; 1 on any other failure.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from .cli import load_category_rules
    from .events import TraceFormatError
    from .summary import summarize

    parser = argparse.ArgumentParser(prog="python -m tools.trace", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--by-rank", action="store_true", help="include each rank's summary")
    parser.add_argument("--categories", metavar="FILE", help="JSON list of [category, regex] pairs")
    parser.add_argument("--by-op", action="store_true", help="kernel time by launching frame instead of the summary")
    args = parser.parse_args(argv)
    try:
        if args.by_op:
            from .ops import attribute

            summary = attribute(args.files)
        else:
            summary = summarize(args.files, by_rank=args.by_rank, categories=load_category_rules(args.categories))
    except (TraceFormatError, ValueError) as exc:
        print(f"tools.trace: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    except Exception as exc:  # a crash is a result the agent logs, not a traceback on stdout
        print(f"tools.trace: failed: {type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return 1
    json.dump(summary.to_dict(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
