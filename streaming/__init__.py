"""The PySpark Structured Streaming job: joins orders, statuses and courier points by order.

:mod:`streaming.enrich` is the plan (Spark operators only; its schemas and checks come
from :mod:`streaming.validation`), :mod:`streaming.job` runs it on Spark's own Kafka
connector in every mode.
"""
