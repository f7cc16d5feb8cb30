"""``python -m embedded.streaming [--reprocess] [--available-now]``: the stream job on the
embedded mode's Kafka connector.

The embedded mode cannot download Spark's spark-sql-kafka package, so the job reads and
writes Kafka through :mod:`embedded.spark_kafka` (``STREAMING_KAFKA_CONNECTOR=python``,
the default). Production runs ``python -m streaming`` (through spark-submit) on Spark's
own ``kafka`` format; the job is the same code.
"""

from __future__ import annotations

import os
import sys

from embedded import jvm
from embedded.spark_kafka import KafkaDataSource, KafkaRowWriter
from streaming.job import PythonConnector, use_python_connector


def register() -> None:
    """Make ``STREAMING_KAFKA_CONNECTOR=python`` run on :mod:`embedded.spark_kafka`."""
    use_python_connector(
        PythonConnector(
            data_source=KafkaDataSource, writer=KafkaRowWriter, spark_conf=jvm.spark_conf()
        )
    )


#: ``make run``'s micro-batch interval. A micro-batch here costs about half a second
#: whatever it holds (docs/performance.md), so at 100 ms batches run back to back and
#: hold a core of the two; the live path (statuses and positions on sockets) does not
#: wait for the job, and what it does wait for (distance left, ETA, Pinot) moves once
#: a second. ``STREAMING_TRIGGER_MS`` overrides it; production's default stays 100 ms.
EMBEDDED_TRIGGER_MS = 1000


if __name__ == "__main__":
    from streaming.__main__ import main

    os.environ.setdefault("STREAMING_TRIGGER_MS", str(EMBEDDED_TRIGGER_MS))
    register()
    sys.exit(main())
