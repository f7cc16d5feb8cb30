"""The PySpark Structured Streaming job: joins orders, statuses and courier points by order.

:mod:`streaming.enrich` is the plan as named DataFrame steps (Spark operators only): its
schemas and checks come from :mod:`streaming.validation`, the stateful join is
:mod:`streaming.join`, the status rules :mod:`streaming.lifecycle`, the records written
:mod:`streaming.records`. :mod:`streaming.job` runs it on Spark's own Kafka connector in
every mode, with :mod:`streaming.settings`, :mod:`streaming.session`,
:mod:`streaming.checkpoint` and :mod:`streaming.progress` around it.
"""
