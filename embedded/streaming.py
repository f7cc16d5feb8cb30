"""``python -m embedded.streaming [--reprocess] [--available-now]``: the stream job on the
embedded mode's Kafka connector.

The embedded mode cannot download Spark's spark-sql-kafka package, so the job reads and
writes Kafka through :mod:`embedded.spark_kafka` (``STREAMING_KAFKA_CONNECTOR=python``,
the default). Production runs ``python -m streaming`` (through spark-submit) on Spark's
own ``kafka`` format; the job is the same code.
"""

from __future__ import annotations

import sys

from embedded.spark_kafka import KafkaDataSource, KafkaRowWriter
from streaming.job import PythonConnector, use_python_connector


def register() -> None:
    """Make ``STREAMING_KAFKA_CONNECTOR=python`` run on :mod:`embedded.spark_kafka`."""
    use_python_connector(PythonConnector(data_source=KafkaDataSource, writer=KafkaRowWriter))


if __name__ == "__main__":
    from streaming.__main__ import main

    register()
    sys.exit(main())
