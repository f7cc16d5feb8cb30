"""``python -m bench NAME [options]`` (``make bench NAME=...``): see bench/harness.py."""

import sys

from bench.harness import main

sys.exit(main())
