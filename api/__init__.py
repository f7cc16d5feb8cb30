"""The versioned REST API (``/api/v1/``) for browsers, mobile apps, restaurants, couriers and operators."""
