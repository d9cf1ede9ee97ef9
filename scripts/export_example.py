"""Ship a finished run under runs/examples: its files and its git history as history.bundle.

    python -m scripts.export_example RUN [DEST]     (DEST defaults to runs/examples/<run-id>)
"""

import sys
from pathlib import Path

from agent.rundir import RunDir, export_run  # noqa: E402


def main() -> int:
    run = RunDir.open(Path(sys.argv[1]))
    dest = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[1] / "runs" / "examples" / run.root.name
    export_run(run, dest)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
