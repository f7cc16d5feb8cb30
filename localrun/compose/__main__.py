"""``python -m localrun.compose``: see :func:`localrun.compose.main`."""

import sys

from localrun.compose import main

sys.exit(main())
