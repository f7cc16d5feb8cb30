"""Every tracking read, as a named function with Pinot SQL, through pinotdb.

The API, the push layer and the dashboards call these functions and nothing
else, so each query is written (and contract-tested) once, against the same
tables in embedded mode (the local Pinot server) and in production (Pinot).

Conventions:

* parameters go through pinotdb's ``%(name)s`` substitution (it quotes strings);
  integers are coerced with ``int()`` first so nothing else reaches the SQL;
* every selection has an explicit LIMIT (Pinot silently returns 10 rows without one);
* nullable event fields are stored with the schema's ``defaultNullValue``
  (0 for times and ids, -1 for distance/ETA); they are turned back into None here;
* any failure to get an answer raises :class:`TrackingUnavailable` (API: 503).

Settings: ``PINOT_BROKER_URL`` (default ``http://127.0.0.1:8099``, the local server
in embedded mode) and ``PINOT_QUERY_TIMEOUT_S`` (default 5).

The reads are grouped by who asks: ``orders`` (following orders), ``operations`` (the
orders under way, for operators and restaurants), ``dashboard`` (a restaurant's sales),
``delivered`` (what the arrival prediction learns from), over ``store`` (the connection).
Callers import this package; each name has one home module. ``records`` holds the few
reads of the system of record (the database) the read model needs beside Pinot's; it is
imported as a module, since it needs Django's models loaded.
"""

from tracker.tracking.selectors.dashboard import (
    MAX_EXCLUDED_CANCELLED,
    SERIES_BUCKETS,
    WINDOWS,
    Dish,
    RestaurantDashboard,
    SalesBucket,
    WindowStats,
    restaurant_dashboard,
    restaurant_sales_series,
)
from tracker.tracking.selectors.delivered import (
    KITCHEN_STEPS,
    KitchenTimes,
    Spread,
    kitchen_times,
    recently_delivered,
    ride_speeds,
)
from tracker.tracking.selectors.operations import (
    StatusPercentiles,
    StuckOrder,
    stuck_orders,
    time_in_status_percentiles,
)
from tracker.tracking.selectors.orders import (
    NULL_VALUES,
    ORDER_COLUMNS,
    CourierPosition,
    OrderState,
    StatusPeriod,
    courier_path,
    courier_paths,
    deliveries_in_area,
    list_orders,
    order_state,
    order_states,
    order_status_history,
    polygon_wkt,
    status_periods,
    thinned_trails,
)
from tracker.tracking.selectors.store import (
    DEFAULT_BROKER_URL,
    KEEPALIVE_SECONDS,
    broker_url,
    query,
)

__all__ = [
    "DEFAULT_BROKER_URL",
    "KEEPALIVE_SECONDS",
    "broker_url",
    "query",
    "ORDER_COLUMNS",
    "NULL_VALUES",
    "CourierPosition",
    "OrderState",
    "list_orders",
    "order_state",
    "order_states",
    "StatusPeriod",
    "order_status_history",
    "status_periods",
    "courier_path",
    "courier_paths",
    "thinned_trails",
    "polygon_wkt",
    "deliveries_in_area",
    "StatusPercentiles",
    "time_in_status_percentiles",
    "KITCHEN_STEPS",
    "Spread",
    "KitchenTimes",
    "kitchen_times",
    "ride_speeds",
    "recently_delivered",
    "StuckOrder",
    "stuck_orders",
    "WINDOWS",
    "Dish",
    "WindowStats",
    "RestaurantDashboard",
    "restaurant_dashboard",
    "MAX_EXCLUDED_CANCELLED",
    "SERIES_BUCKETS",
    "SalesBucket",
    "restaurant_sales_series",
]
