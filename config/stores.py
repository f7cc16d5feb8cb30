"""Where the cache and the channel layer live: this process's memory in embedded mode,
Redis in production (``REDIS_URL``), with the options redis-py 8 needs for our Redis.

redis-py 8 speaks RESP3 by default, and then asks the server for maintenance notifications
(a Redis Cloud and Enterprise feature; Debian's redis-server 7 refuses it). Once it has
asked, its pools no longer check that the server has not closed a pooled connection
before handing it out (redis-py issues 4128 and 4252). So after Redis restarts, each
connection opened before fails once, the next time it is used. channels_redis's asyncio
pools showed this: in the fault drill 4 WebSocket joins failed that way, the last 18.6 s
after Redis was back. Django's cache pools escaped only because the pure-Python parser
reads the closed socket during that check; hiredis would not. With the notifications
off, a pool replaces a closed connection before handing it out. A retry is not used
instead: it would send again a command that may already have run (a push sent twice, a
read counted twice).
"""

from __future__ import annotations

from typing import Any

from redis.maint_notifications import MaintNotificationsConfig

from runtime.conf import var_dir

#: What every Redis pool of ours is built with (Django's cache passes its ``OPTIONS`` to
#: redis-py's pool; channels_redis passes the rest of a host's entry).
REDIS_POOL_OPTIONS: dict[str, Any] = {
    "maint_notifications_config": MaintNotificationsConfig(enabled=False),
}

#: channels_redis waits for a socket's next message with a BZPOPMIN of up to 5 s
#: (``RedisChannelLayer.brpop_timeout``). redis-py 8 stops reading a reply after 5 s
#: (``socket_timeout``), so an idle wait ended in TimeoutError and closed the socket
#: (channels_redis issue 422). The layer's reads wait longer than the BZPOPMIN does. A
#: Redis that stops answering still fails a send after this long.
CHANNEL_LAYER_SOCKET_TIMEOUT_S = 10


#: The caches' commands are single-key reads and writes answered in well under a
#: millisecond: a Redis that takes longer than this to accept or answer is treated as
#: unreachable (503 with Retry-After, api/errors.py) rather than left to hold the
#: request's thread for as long as the network lets it.
CACHE_SOCKET_TIMEOUT_S = 2


def cache_settings(redis_url: str) -> dict[str, dict[str, Any]]:
    """``CACHES``: the throttles' counters (``default``), the version register
    (``versions``) and socket tickets (``tickets``), all in Redis when ``redis_url`` is
    set. Without Redis the first two are each process's own; tickets are files under
    ``var/cache``, because a ticket issued by one web process (``make run`` runs two) is
    redeemed by whichever one the socket reaches (a file's removal has one winner)."""
    if not redis_url:
        return {
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            "tickets": {
                "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                "LOCATION": str(var_dir() / "cache" / "socket-tickets"),
                # Culled (a third, at random) only past this many: a live one is never
                # culled under a local run's load (a ticket lives 30 s).
                "OPTIONS": {"MAX_ENTRIES": 10_000},
            },
            # Not in "default": the local form keeps 300 entries, and one entry per
            # recent order would cull the throttles' counters.
            "versions": {
                "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                "LOCATION": "versions",
                "OPTIONS": {"MAX_ENTRIES": 200_000},
            },
        }

    def redis(**more: str) -> dict[str, Any]:
        return {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": {
                **REDIS_POOL_OPTIONS,
                "socket_connect_timeout": CACHE_SOCKET_TIMEOUT_S,
                "socket_timeout": CACHE_SOCKET_TIMEOUT_S,
            },
            **more,
        }

    return {
        "default": redis(),
        "versions": redis(KEY_PREFIX="versions"),
        "tickets": redis(KEY_PREFIX="tickets"),
    }


def channel_layer_settings(redis_url: str) -> dict[str, dict[str, Any]]:
    """``CHANNEL_LAYERS``: Redis when ``redis_url`` is set, so every web process and the
    push bridge reach every socket; else this process's own layer."""
    if not redis_url:
        return {
            "default": {
                "BACKEND": "tracker.live.layers.SweepingInMemoryChannelLayer",
                "CONFIG": {"capacity": 1000},
            }
        }
    host = {
        "address": redis_url,
        "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_S,
        **REDIS_POOL_OPTIONS,
    }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [host], "capacity": 1000, "expiry": 30},
        }
    }
