"""Django settings, every value read from the environment with an embedded default.

The defaults run the whole system on one machine (SQLite under ``var/``, the
in-memory channel layer, a local Apache Kafka and Apache Pinot on loopback), with debug
off unless ``DJANGO_DEBUG=true`` asks for it (``make run``, the tests, the benchmarks):
a process started any other way gets the production settings, and so refuses the public
development key. Production sets the variables listed in README.md's configuration table.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.stores import cache_settings, channel_layer_settings
from runtime.conf import env_bool, env_float, env_int, env_list, env_str, var_dir
from tracker.accounts.rates import outlasts

#: The built-in key: fine on a laptop, never with debug off (see the check below).
DEVELOPMENT_SECRET_KEY = "embedded-development-only-not-a-secret"

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
if not DEBUG and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    # Sessions, password-reset links and signed values would be forgeable by anyone who
    # has read this repository: refuse to start rather than run production with it.
    raise ImproperlyConfigured(
        "DJANGO_DEBUG is off (the default) but DJANGO_SECRET_KEY is not set (the built-in "
        "development key "
        "is public). Set DJANGO_SECRET_KEY to 50+ random characters, e.g. the output of "
        '`python -c "import secrets; print(secrets.token_urlsafe(50))"`, or set '
        "DJANGO_DEBUG=true for local development. See docs/operations.md, production checklist."
    )
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list(
    "DJANGO_CSRF_TRUSTED_ORIGINS", ["http://127.0.0.1:8000", "http://localhost:8000"]
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "tracker.accounts",
    "tracker.customers",
    "tracker.restaurants",
    "tracker.couriers",
    "tracker.orders",
    "tracker.sharing",
    "tracker.outbox",
    "tracker.notices",
    "tracker.notifications",
    "tracker.tracking",
    "tracker.cache",
    "tracker.simulator",
    "tracker.operations",
    "tracker.live",
    "api",
    "frontend",
]

MIDDLEWARE = [
    "config.middleware.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.SecurityHeadersMiddleware",
    "config.middleware.RequestSizeLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.LoginThrottleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_CONN_MAX_AGE = env_int("DATABASE_CONN_MAX_AGE", 60)
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{var_dir() / 'ordertrack.sqlite3'}"),
        conn_max_age=DATABASE_CONN_MAX_AGE,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (ASGI server, relay, simulator) share the file: WAL and a
    # generous busy timeout keep writers from failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Short-lived connections: long-lived ones in the relay's and the workers' threads
    # keep stale views of the file, and keeping them gains no latency.
    # The web's long-lived request threads keep theirs (config/asgi_threads.py).
    DATABASES["default"]["CONN_MAX_AGE"] = 0

#: Long-lived threads per web process for Django's sync request handling, each keeping its
#: database connection this long (config/asgi_threads.py): the most database connections a
#: web process opens for requests (docs/operations.md, 3.4).
REQUEST_THREADS = env_int("WEB_REQUEST_THREADS", 8)
REQUEST_THREAD_CONN_MAX_AGE = DATABASE_CONN_MAX_AGE
#: A request that finds them all busy waits for one, in arrival order. At most this many
#: wait per process; the next is answered 503 + Retry-After at once. At the 7.4 ms of web
#: CPU a detail read took on the production path (docs/performance.md), a worker with a
#: whole core answers at most about 135 a second, fewer beside the rest of a 2-core
#: machine: 100 waiting is one to a few seconds of its work. A burst waits that out; a
#: lasting surplus is refused at once, instead of every request waiting to time out. Each
#: waiting request holds its body in memory (read first; at most REQUEST_MAX_BODY_BYTES).
REQUEST_QUEUE_MAX = env_int("WEB_REQUEST_QUEUE_MAX", 100)
#: ... and one waits at most this long (then 503 + Retry-After): longer than a dependency's
#: own timeout (Pinot's 5 s, Redis's 2 s) holds a thread, so a request queued behind
#: threads held by one is still served; shorter than a client waits before giving up
#: (the benchmarks, 30 s), so it gets an answer it can act on.
REQUEST_QUEUE_TIMEOUT_S = env_float("WEB_REQUEST_QUEUE_TIMEOUT_S", 10.0)
if REQUEST_THREADS < 1 or REQUEST_QUEUE_MAX < 0 or not REQUEST_QUEUE_TIMEOUT_S > 0:
    raise ImproperlyConfigured(
        "WEB_REQUEST_THREADS must be at least 1, WEB_REQUEST_QUEUE_MAX 0 or more (0: refuse "
        "at once when every thread is busy) and WEB_REQUEST_QUEUE_TIMEOUT_S more than 0."
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("DJANGO_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = var_dir() / "static"  # collectstatic target; WhiteNoise serves it
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = DEBUG  # in development, serve app static files without collectstatic

#: Our dictConfig, which also keeps share-link tokens (and API tokens in a socket's query
#: string) out of every log line, whichever logger writes it (runtime/logs.py).
LOGGING_CONFIG = "runtime.logs.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "runtime.logs.JSONFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if env_str("LOG_FORMAT", "plain").lower() == "json" else "plain",
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # httpx logs every request at INFO: the pipeline monitor's controller asks, every sample.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# --- request limits and login throttles (tracker/accounts/security.py, config/middleware.py) --
#: Largest request body accepted (413 above it), for every path: DRF's JSON parser
#: reads the raw stream, so Django's own form limit below does not cover the API.
REQUEST_MAX_BODY_BYTES = env_int("REQUEST_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BODY_BYTES
#: Per client, before a request waits for a thread (config.asgi_limits.AnonymousPathLimit):
#: health, readiness, share pages, the sign-in page and the API's docs, per web worker.
ANONYMOUS_PATH_RATE = env_float("ANONYMOUS_PATH_RATE", 20.0)
ANONYMOUS_PATH_BURST = env_int("ANONYMOUS_PATH_BURST", 120)
#: Reverse proxies in front of the app that append to X-Forwarded-For (Caddy in
#: docker-compose.yml: 1). 0 = ignore the header: the client is REMOTE_ADDR.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
#: Every sign-in path, throttled per client and per user name. Every attempt counts against
#: both; the name's budget is larger than one client's, so one client spending all of its
#: attempts on a name cannot lock its owner out, and a guess spread over many clients is
#: still capped.
LOGIN_PATHS = frozenset({"/api/v1/auth/token/", "/accounts/login/", "/admin/login/"})
LOGIN_THROTTLE_PER_CLIENT = env_str("API_THROTTLE_LOGIN", "10/min")
#: A browser or app that signs in keeps a signed device cookie this many days: its later
#: attempts at that name spend their own budget (the per-client rate), not the name's, so
#: addresses spending the name's budget cannot lock its owner out of their own devices.
LOGIN_DEVICE_DAYS = env_int("LOGIN_DEVICE_DAYS", 90)
LOGIN_THROTTLE_PER_USERNAME = env_str("API_THROTTLE_LOGIN_USERNAME", "30/min")
if not outlasts(LOGIN_THROTTLE_PER_USERNAME, LOGIN_THROTTLE_PER_CLIENT):
    raise ImproperlyConfigured(
        f"API_THROTTLE_LOGIN_USERNAME ({LOGIN_THROTTLE_PER_USERNAME}) must allow more attempts "
        f"than API_THROTTLE_LOGIN ({LOGIN_THROTTLE_PER_CLIENT}): otherwise one client can "
        "spend a user name's whole budget and lock its owner out of sign-in."
    )

#: The web's /metrics on an internal listener (config/metrics_listener.py), on METRICS_HOST:
#: what Prometheus scrapes in production (compose: 9100). 0 = off (the public /metrics).
WEB_METRICS_PORT = env_int("WEB_METRICS_PORT", 0)

#: Delivery addresses a customer may keep (tracker/customers/services.py; 400 beyond).
CUSTOMER_MAX_ADDRESSES = env_int("CUSTOMER_MAX_ADDRESSES", 20)

#: API tokens (mobile apps) expire this many days after sign-in; 0 = never.
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", 30)
#: API tokens a user may hold at once (one per signed-in app): a sign-in past it revokes
#: the oldest, so a client signing in in a loop cannot grow the table without bound.
API_TOKENS_PER_USER = env_int("API_TOKENS_PER_USER", 20)
#: How long a socket ticket (POST /api/v1/auth/socket-ticket/) may wait for its socket.
SOCKET_TICKET_SECONDS = env_int("SOCKET_TICKET_SECONDS", 30)

# --- REST API -------------------------------------------------------------------
#: Reads per signed-in user (api.throttles.ReadRateThrottle), 304s included. A customer's app
#: polling an order every 2 s (30/min) beside its order list every 10 s (6/min), and a
#: browser page (a few reads on load, then one per new order pushed), use about a third of
#: 120/min; a client in a loop is held to 2 reads a second. Restaurant staff and operators
#: read dashboards, boards and lists, often from several tablets on one account: 600/min.
API_THROTTLE_READS = env_str("API_THROTTLE_READS", "120/min")
API_THROTTLE_READS_STAFF = env_str("API_THROTTLE_READS_STAFF", "600/min")
if not outlasts(API_THROTTLE_READS_STAFF, API_THROTTLE_READS):
    raise ImproperlyConfigured(
        f"API_THROTTLE_READS_STAFF ({API_THROTTLE_READS_STAFF}) must allow more reads than "
        f"API_THROTTLE_READS ({API_THROTTLE_READS}): it is the higher budget of restaurant staff "
        "and operators, who spend the ordinary one first (a lower one would never apply)."
    )
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.ExpiringTokenAuthentication",  # mobile apps
        "rest_framework.authentication.SessionAuthentication",  # the browser (CSRF enforced)
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["api.renderers.JSONRenderer"],  # DRF's, reusing made bodies
    # JSON only: one request encoding for generated clients (forms would be 415). Pages and
    # the admin post Django forms, not to the API.
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.JSONParser",  # DRF's, plus a nesting limit (deep nesting was a 500)
    ],
    "DEFAULT_SCHEMA_CLASS": "api.schema.AutoSchema",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",  # APIClient speaks what the API accepts
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    # A view's throttle_scope for its writes; every signed-in read per user (api/throttles.py).
    "DEFAULT_THROTTLE_CLASSES": [
        "api.throttles.ScopedRateThrottle",
        "api.throttles.ReadRateThrottle",
    ],
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,  # never key throttles on a client-written header
    "DEFAULT_THROTTLE_RATES": {
        "login": env_str("API_THROTTLE_LOGIN", "10/min"),
        "orders": env_str("API_THROTTLE_ORDERS", "30/min"),
        "writes": env_str("API_THROTTLE_WRITES", "240/min"),
        "locations": env_str("API_THROTTLE_LOCATIONS", "600/min"),
        "shares": env_str("API_THROTTLE_SHARES", "30/hour"),
        "reads": API_THROTTLE_READS,
        "reads_staff": API_THROTTLE_READS_STAFF,
    },
    "DATETIME_FORMAT": "iso-8601",
    "COERCE_DECIMAL_TO_STRING": True,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
#: A courier's GPS points per order (api.throttles.LocationPointsThrottle): a burst of
#: 1,200 points (a phone's offline queue: 20 minutes at one point a second, in batches of
#: up to 500), refilled at 2 points a second (a phone reports about one a second).
LOCATION_POINTS_PER_SECOND = env_float("API_LOCATION_POINTS_PER_SECOND", 2.0)
LOCATION_POINTS_BURST = env_int("API_LOCATION_POINTS_BURST", 1200)
SPECTACULAR_SETTINGS = {
    "TITLE": "Ordertrack API",
    "DESCRIPTION": (
        "Customer order tracking. Writes go to the system of record (database + outbox); "
        "tracking reads come from Apache Pinot. Times are ISO-8601 UTC, money is a decimal "
        'string, every error is {"error": {status, code, message, fields?}}. Each user\'s reads '
        "and writes have budgets (a larger read budget for restaurant staff and operators; "
        "a 304 counts); beyond one, 429 with `Retry-After` seconds to wait. The live updates "
        "over WebSocket (/ws/...) are described by the "
        "AsyncAPI document at /api/asyncapi/."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",  # served from our static files: works offline
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,  # read-only fields (ids) stay out of request bodies
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "ENUM_NAME_OVERRIDES": {
        "OrderStatus": "api.serializers.orders.STATUSES",
        "AdvanceTarget": "api.serializers.orders.ADVANCE_TARGETS",
        # one name per GeoJSON type, or the Feature's shape would take the Polygon's enum
        "GeoJSONPolygonType": ["Polygon"],
        "GeoJSONFeatureType": ["Feature"],
    },
    "TAGS": [
        {"name": "Account", "description": "Signing in and out, who I am, my addresses."},
        {"name": "Menu", "description": "Restaurants and their menus."},
        {"name": "Orders", "description": "Placing, following and moving orders; GPS points."},
        {
            "name": "Notifications",
            "description": "Web Push subscriptions, notification preferences, the VAPID key.",
        },
        {
            "name": "Operations",
            "description": "Analytics for operators, and for restaurant "
            "staff on their own restaurant.",
        },
    ],  # fmt: skip
}

# Throttle counters and the version register (tracker/cache/reads.py): per process
# in embedded mode, shared through Redis in production (config/stores.py).
REDIS_URL = env_str("REDIS_URL", "")
CACHES = cache_settings(REDIS_URL)

# --- live push (Channels) -----------------------------------------------------------
CHANNEL_LAYERS = channel_layer_settings(REDIS_URL)
#: Run the Kafka -> WebSocket bridge inside the ASGI process (embedded mode). With
#: several ASGI servers, set false and run `manage.py pushbridge` with REDIS_URL.
PUSH_BRIDGE_EMBEDDED = env_bool("PUSH_BRIDGE_EMBEDDED", not REDIS_URL)
PUSH_HEARTBEAT_SECONDS = float(env_str("PUSH_HEARTBEAT_SECONDS", "20"))
#: Safety net behind the revocation messages (tracker/live/signals.py): every open socket
#: re-checks its credential and its access this often, so a change made where the
#: channel layer does not reach (another process in embedded mode) still closes it.
PUSH_RECHECK_SECONDS = float(env_str("PUSH_RECHECK_SECONDS", "30"))
#: What a client may send a WebSocket (tracker/live/limits.py): the largest message (the
#: largest a client sends is a ping; uvicorn's --ws-max-size is set to the same number in
#: every command line), open sockets per user (operators too), connects per user, and
#: messages per socket. Over size: close 1009; over a count or rate: close 4429.
WS_MAX_MESSAGE_BYTES = env_int("WS_MAX_MESSAGE_BYTES", 4096)
WS_MAX_SOCKETS_PER_USER = env_int("WS_MAX_SOCKETS_PER_USER", 20)
WS_CONNECT_RATE = env_str("WS_CONNECT_RATE", "60/min")
WS_PING_RATE = env_str("WS_PING_RATE", "30/min")

# --- who sees what (tracker/orders/policy.py) -------------------------------------------
#: A courier sees an order it carried (its customer's name, address and items) this long
#: after delivering it, then no longer: the orders it carries now, plus this grace.
COURIER_ORDER_GRACE = timedelta(hours=env_float("COURIER_ORDER_GRACE_HOURS", 2))
if timedelta(0) > COURIER_ORDER_GRACE:
    raise ImproperlyConfigured("COURIER_ORDER_GRACE_HOURS must be 0 or more.")

# --- shared tracking links (tracker/sharing) -----------------------------------------
#: A link stops working this long after its order was delivered or cancelled ...
SHARE_LINK_GRACE = timedelta(minutes=env_float("SHARE_LINK_GRACE_MINUTES", 30))
#: ... and at the latest this long after it was made (at most 24 hours).
SHARE_LINK_MAX_AGE = timedelta(hours=env_float("SHARE_LINK_MAX_AGE_HOURS", 24))
if not timedelta(0) < SHARE_LINK_MAX_AGE <= timedelta(hours=24):
    raise ImproperlyConfigured(
        f"SHARE_LINK_MAX_AGE_HOURS must be more than 0 and at most 24 (got "
        f"{SHARE_LINK_MAX_AGE.total_seconds() / 3600:g}): a shared tracking link works for at "
        "most a day."
    )
if timedelta(0) > SHARE_LINK_GRACE:
    raise ImproperlyConfigured("SHARE_LINK_GRACE_MINUTES must be 0 or more.")
#: Working links an order may have at once (a 409 beyond: stop sharing first).
SHARE_MAX_LINKS_PER_ORDER = env_int("SHARE_MAX_LINKS_PER_ORDER", 5)
#: Share pages (/t/<token>/) and share socket connects per client address, counted before
#: the token is looked up; open share sockets per link.
SHARE_VIEW_RATE = env_str("SHARE_VIEW_RATE", "60/min")
SHARE_CONNECT_RATE = env_str("SHARE_CONNECT_RATE", "30/min")
SHARE_MAX_SOCKETS_PER_LINK = env_int("SHARE_MAX_SOCKETS_PER_LINK", 10)

# --- notifications (tracker/notifications) ----------------------------------------------
#: The https hosts of the browser push services a subscription may name (``*.`` matches any
#: subdomain): Chrome and Edge's FCM, Firefox's autopush, Safari's, Windows' WNS.
WEBPUSH_ALLOWED_HOSTS = env_list(
    "WEBPUSH_ALLOWED_HOSTS",
    [
        "fcm.googleapis.com",
        "updates.push.services.mozilla.com",
        "*.push.apple.com",
        "*.notify.windows.com",
    ],
)
#: A push service on loopback (http too) for ``make run`` and the tests; never with debug
#: off. Private, link-local and metadata addresses stay refused even then.
WEBPUSH_ALLOW_LOCAL = env_bool("WEBPUSH_ALLOW_LOCAL", False)
if WEBPUSH_ALLOW_LOCAL and not DEBUG:
    raise ImproperlyConfigured(
        "WEBPUSH_ALLOW_LOCAL lets subscriptions name loopback addresses: for make run and the "
        "tests only, never with DJANGO_DEBUG off."
    )
#: The VAPID key (tracker/notifications/vapid.py): PEM or base64url, else this PEM file
#: (made on first use with debug on).
WEBPUSH_VAPID_PRIVATE_KEY = env_str("WEBPUSH_VAPID_PRIVATE_KEY", "")
#: Its public half (base64url, uncompressed point): all the web needs, so the web processes
#: in production never hold the private key.
WEBPUSH_VAPID_PUBLIC = env_str("WEBPUSH_VAPID_PUBLIC", "")
WEBPUSH_VAPID_KEY_FILE = env_str("WEBPUSH_VAPID_KEY_FILE", str(var_dir() / "vapid" / "private.pem"))
#: Make that file when it is missing (a new key: every subscription made with the old one
#: stops working): the embedded mode's default, never in production.
WEBPUSH_VAPID_GENERATE = env_bool("WEBPUSH_VAPID_GENERATE", DEBUG)
#: The contact a push service may write to about our traffic (VAPID's ``sub`` claim).
WEBPUSH_VAPID_SUBJECT = env_str("WEBPUSH_VAPID_SUBJECT", "mailto:notifications@ordertrack.invalid")
#: Subscriptions one user may keep (400 beyond: delete one first).
WEBPUSH_MAX_SUBSCRIPTIONS_PER_USER = env_int("WEBPUSH_MAX_SUBSCRIPTIONS_PER_USER", 20)
#: The customers' time zone, for the times in notifications (the demo city is Bengaluru).
NOTIFY_TIME_ZONE = env_str("NOTIFY_TIME_ZONE", "Asia/Kolkata")

#: The notifier (``manage.py notify``): a moment decided from an event older than this is
#: logged as dropped, not sent (after notifier downtime, a broker refill, a topic rebuild).
NOTIFY_MAX_AGE_SECONDS = env_float("NOTIFY_MAX_AGE_SECONDS", 900.0)
#: "Running late": the predicted arrival is this much past the latest time told.
NOTIFY_LATE_MARGIN_SECONDS = env_float("NOTIFY_LATE_MARGIN_SECONDS", 300.0)
#: An order on the road is checked for "running late" at most this often (its courier sends
#: a point a second; a slip is minutes): the notifier skips its other points unread.
NOTIFY_LATE_CHECK_SECONDS = env_float("NOTIFY_LATE_CHECK_SECONDS", 15.0)
#: How long a push service keeps a message for a device that is asleep (RFC 8030 TTL;
#: never 0, which drops it unless the device is awake at that instant).
NOTIFY_PUSH_TTL_SECONDS = env_int("NOTIFY_PUSH_TTL_SECONDS", 4 * 3600)
#: Tries of one send (429, 5xx, a timeout), with exponential backoff from the first delay.
NOTIFY_MAX_TRIES = env_int("NOTIFY_MAX_TRIES", 4)
NOTIFY_RETRY_SECONDS = env_float("NOTIFY_RETRY_SECONDS", 1.0)
#: One push request's or SMTP conversation's timeout (seconds).
NOTIFY_SEND_TIMEOUT_SECONDS = env_float("NOTIFY_SEND_TIMEOUT_SECONDS", 5.0)
#: Sends at once, in all; and at once to one push service host or mail relay, so a slow
#: one holds at most three times this many (its slow lane: NOTIFY_SLOW_SECONDS) and never
#: delays the others.
NOTIFY_WORKERS = env_int("NOTIFY_WORKERS", 64)
NOTIFY_PER_DESTINATION = env_int("NOTIFY_PER_DESTINATION", 8)
#: A push still unanswered after this long gives its host's slot back and finishes in the
#: host's slow lane; its subscription then sends there (one hung subscription of a push
#: service never holds the service's other subscriptions).
NOTIFY_SLOW_SECONDS = env_float("NOTIFY_SLOW_SECONDS", 1.0)
#: A push logged as sending this long ago, by a notifier that stopped, is sent again; an
#: email is then counted unknown, never resent.
NOTIFY_SENDING_LEASE_SECONDS = env_float("NOTIFY_SENDING_LEASE_SECONDS", 60.0)
#: The notifier's member id in its consumer group (static membership): unique per replica;
#: a restart under the same id resumes its partitions at once. The host name by default.
NOTIFIER_INSTANCE_ID = env_str("NOTIFIER_INSTANCE_ID", f"notifier-{socket.gethostname()}")
#: Where the emails' links point (the site's public origin).
NOTIFY_SITE_URL = env_str("NOTIFY_SITE_URL", "http://127.0.0.1:8000")
#: The page where a customer changes their notification preferences.
NOTIFY_PREFERENCES_PATH = env_str("NOTIFY_PREFERENCES_PATH", "/settings/notifications/")
#: Email: Django's SMTP backend, to the relay the environment names.
NOTIFY_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 1025)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = NOTIFY_SEND_TIMEOUT_SECONDS
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Ordertrack <notifications@ordertrack.invalid>")

# --- the simulator (tracker/simulator/seed.py) ------------------------------------
#: With debug off, the only password the demo accounts may get (refused when unset, the
#: public demo password, or weak); with debug on they get the public ``ordertrack-demo``.
SIMULATOR_DEMO_PASSWORD = env_str("SIMULATOR_DEMO_PASSWORD", "")

# --- the event pipeline -------------------------------------------------------
OUTBOX_RELAY_BATCH_SIZE = env_int("OUTBOX_RELAY_BATCH_SIZE", 500)
#: An idle relay looks at the outbox every POLL seconds, or every IDLE seconds while commits
#: wake it (tracker/outbox/wakeup.py): IDLE bounds the delay of a lost wake-up.
OUTBOX_RELAY_POLL_SECONDS = float(env_str("OUTBOX_RELAY_POLL_SECONDS", "0.05"))
OUTBOX_RELAY_IDLE_SECONDS = float(env_str("OUTBOX_RELAY_IDLE_SECONDS", "1.0"))

# --- production hardening (on whenever DEBUG is off) -----------------------------
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
