"""The event contract and the plumbing every process shares, free of any framework.

Django (the project and its apps), the Spark job (``streaming``) and the Pinot
table loader (``pinot``) all stand on this package: the events and topics
(``events``), the environment settings (``conf``), the Kafka clients
(``kafka``) and the geometry the ETA uses (``geo``). Nothing in it imports
Django or Spark, so importing it needs no Django setup
(``tests/test_layering.py``).
"""
