"""The PySpark Structured Streaming job: joins orders, statuses and courier points by order.

:mod:`streaming.enrich` is the plan (Spark operators only), :mod:`streaming.job`
runs it, :mod:`embedded.spark_kafka` is the embedded mode's Kafka connector.
"""
