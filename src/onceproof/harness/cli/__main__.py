"""``python -m onceproof.harness.cli ...``: the same as the ``onceproof`` console script."""

import sys

from onceproof.harness.cli import main

sys.exit(main())
