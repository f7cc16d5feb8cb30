"""``python -m localrun.pinot``: see :func:`localrun.pinot.main`."""

import sys

from localrun.pinot import main

sys.exit(main())
