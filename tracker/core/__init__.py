"""The framework-free core: event contract, settings, Kafka helpers, geo, embedded broker.

Django (the project and its apps), the Spark job (``streaming``) and the Pinot
stand-in (``pinot``) all stand on this package, so nothing in it imports
Django, Spark or DuckDB; importing it needs no Django setup.
"""
