"""``python -m tools.kernel_source --source PATH --kernel NAME --shape SYM=VAL ... --sms N [--arch sm_120]``"""

import sys

from .cli import main

sys.exit(main())
