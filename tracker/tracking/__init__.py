"""Tracking reads: the Pinot queries (``selectors``) and what every channel shows of an
order (``read_model``), so REST, WebSocket and any new channel read one way."""
