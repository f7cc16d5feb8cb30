"""API views, one module per area. Thin: they check who asks, validate the request,
call a service (writes) or a selector / the read model (reads), and serialize."""
