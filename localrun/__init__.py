"""What only the one-machine mode (``make run``, ``make run-prod``, the tests) runs.

It runs the real engines as local processes: Apache Kafka (``kafka``, from the
jars of ``jvm/kafka``) and Apache Pinot (``pinot``, from ``jvm/pinot``) under the
process supervisor (``supervisor``, ``components``, ``python -m localrun``).
Production replaces the supervisor and the compose emulator (``compose``) with
Docker Compose, and the throwaway PostgreSQL and Redis (``backends``) with real
servers.

Code here may import anything below it; production code (``config``,
``contract``, ``runtime``, ``tracker``, ``api``, ``frontend``, ``streaming``, ``pinot``)
imports nothing from here (``tests/integration/config/test_layering.py``).
"""
