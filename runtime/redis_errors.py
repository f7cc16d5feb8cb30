"""What Redis's clients raise when Redis cannot be reached (stopped, restarting, loading
its data, a network that drops or stalls): :data:`REDIS_UNREACHABLE`.

In production Redis holds the request budgets (the REST throttles, sign-in attempts, a
user's sockets and connects) and the channel layer (``config/stores.py``). Whatever
cannot be counted or joined while it is gone is refused, never let through: REST answers
503 with ``Retry-After`` (``api/errors.py``), a sign-in too (``config/middleware.py``),
and a socket closes with 4503 (``tracker/live/consumers.py``). Redis's other errors (a
command it refuses, its memory full) are not outages, and stay errors.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: redis-py's, from Django's cache and channels_redis alike. Among the first: a server
#: still loading its data after a restart (``BusyLoadingError``), a pool with no
#: connection left to hand out, a password Redis refuses.
REDIS_UNREACHABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError)
