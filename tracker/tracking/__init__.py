"""Tracking reads: the queries (``selectors``) and what every channel shows of an order
(``read_model``, as typed ``shapes`` that ``serializers.to_json`` renders), so REST,
WebSocket and any new channel read one way. What a process caches of reads is
:mod:`tracker.cache`."""
