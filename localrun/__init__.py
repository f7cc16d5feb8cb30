"""What only the one-machine mode (``make run``, ``make run-prod``, the tests) runs.

It runs the real engines as local processes: Apache Kafka (``kafka``, from the
jars of ``jvm/kafka``) and Apache Pinot (``pinot``, from ``jvm/pinot``) under the
process supervisor (``supervisor``, ``components``). One launcher starts them:
:class:`localrun.launch.System` (start these components, where they answer, stop them)
serves ``make run`` (``python -m localrun``), ``make run-prod`` (``compose``), the test
suite's engines (tests/engines.py) and every benchmark (bench/harness.py). Production
replaces the supervisor and the compose emulator with Docker Compose, and the throwaway
PostgreSQL and Redis (``backends``) with real servers.

Code here may import anything below it; production code (``config``,
``contract``, ``runtime``, ``tracker``, ``api``, ``frontend``, ``streaming``, ``pinot``)
imports nothing from here (``tests/integration/config/test_layering.py``).
"""
