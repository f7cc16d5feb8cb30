"""The PySpark Structured Streaming job: joins orders, statuses and courier points by order.

:mod:`streaming.enrich` is the plan (Spark operators only), :mod:`streaming.job`
runs it, :mod:`streaming.connector` is the embedded mode's Kafka connector.
"""
