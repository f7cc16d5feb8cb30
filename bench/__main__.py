"""``python -m bench NAME [options]`` (``make bench NAME=...``): see bench/harness.py."""

import sys

from bench.harness import main

if __name__ == "__main__":  # not when a scenario's fresh process imports it
    sys.exit(main())
