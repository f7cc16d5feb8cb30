"""Tracking reads: the queries (``selectors``), what every channel shows of an order
(``read_model``, as typed ``shapes`` that ``serializers.to_json`` renders), and what a
process keeps of reads (``copies``), so REST, WebSocket and any new channel read one way."""
