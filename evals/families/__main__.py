"""``python -m evals.families``: write the family incidents (see the package docstring)."""

import sys

from evals.families import main

sys.exit(main())
