"""``python -m tools.kernels.splitk check|bench ...``: the split-K decode's check and timing (``cli``)."""

import sys

from tools.kernels.splitk.cli import main

sys.exit(main())
