"""``python -m streaming [--reprocess] [--available-now]``: run the stream job.

Settings come from the environment (see :class:`streaming.settings.Settings`). Once the
first micro-batch completes it prints ``streaming: ready`` on stdout for the
supervisor. ``--reprocess`` replays the source topics from the beginning into
fresh state (a new checkpoint directory) and stops when caught up (Kappa-style);
with ``STREAMING_OUTPUT_PREFIX`` the rebuilt outputs go to a fresh set of topics.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from dataclasses import replace

from .job import run
from .settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming", description=__doc__)
    parser.add_argument(
        "--reprocess",
        action="store_true",
        help="rebuild the outputs from the beginning of the topics with fresh state, then stop",
    )
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process what is in the topics now (on the configured checkpoint), then stop",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = Settings()
    if args.reprocess:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        settings = replace(
            settings,
            checkpoint_dir=f"{settings.checkpoint_dir}-reprocess-{stamp}",
            starting_offsets="earliest",
            available_now=True,
        )
    elif args.available_now:
        settings = replace(settings, available_now=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return run(settings, stop)


if __name__ == "__main__":
    sys.exit(main())
