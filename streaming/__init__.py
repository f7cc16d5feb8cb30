"""The PySpark Structured Streaming job: joins orders, statuses and courier points by order.

:mod:`streaming.enrich` is the plan (Spark operators only; its schemas and checks come
from :mod:`streaming.validation`), :mod:`streaming.job` runs it. The job reads and writes Kafka by a format name: Spark's own ``kafka`` in
production, the embedded mode's Python connector (:mod:`embedded.spark_kafka`, registered
by ``python -m embedded.streaming``) on one machine.
"""
