"""What only the one-machine mode (``make run``, ``make run-prod``, the tests) runs.

Production replaces each part: the Tansu broker (``broker``) with Apache Kafka,
the process supervisor (``supervisor``, ``components``, ``python -m embedded``)
and the compose emulator (``compose``) with Docker Compose, the throwaway
PostgreSQL and Redis (``backends``) with real servers, Spark's Python Kafka
source and sink (``spark_kafka``) with Spark's own ``kafka`` format, and the
Pinot stand-in's HTTP server (``pinot_server``) with Apache Pinot.

Code here may import anything below it; production code (``config``,
``contract``, ``tracker``, ``api``, ``frontend``, ``streaming``, ``pinot``)
imports nothing from here (``tests/test_layering.py``).
"""
