"""``python -m pinot``: run the local Pinot server (embedded mode)."""

import sys

from pinot.server import main

sys.exit(main())
