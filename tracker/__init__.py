"""The Django apps of Ordertrack: the domain (customers, restaurants, couriers, orders,
outbox, tracking), the live push (``live``), sign-in (``accounts``), the operators'
commands and health check (``operations``) and the demo load (``simulator``).

The project around them (settings, URLs, ASGI) is ``config/``; what they share with
the Spark job and Pinot's table definitions is ``contract/``.
"""
