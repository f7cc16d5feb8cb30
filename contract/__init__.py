"""The event contract, free of any framework and of any process's plumbing.

The events (``events``: callers import everything from it, though the topics live in
``topics``, the order lifecycle in ``lifecycle`` and what every message shares in
``messages``), the rule table every check is derived from (``rules``) and the geometry
the ETA and the stream job share (``geo``). Django, the Spark job (``streaming``, also
inside its executors) and the Pinot table loader (``pinot``) all stand on it; it
imports nothing of ours outside itself and no framework (``tests/integration/config/test_layering.py``).
"""
