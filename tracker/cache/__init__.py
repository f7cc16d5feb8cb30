"""The read side's cache: everything a process or Redis keeps so that a read costs less.

| What is kept | Under which key | What drops it | How stale it may be |
|---|---|---|---|
| An order's placed part (items, names, owner) | ``reads._placed``: order id (10,000 per process) | an admin save of its customer, restaurant or product (at once here, by notice elsewhere); LRU; a notice-listener resync | elsewhere until the notice is read (0.2 s poll); never used while the listener has not read for 2 s |
| A courier's name | ``reads._courier_names``: courier id (2,000) | an admin save of the courier or its user; LRU; resync | as above |
| An order's trail | ``reads._trails``: (order id, last position ms) (500) | LRU only: a trail only grows, a new point is a new key | never |
| An order's state (Pinot's row) | ``reads._states``: order id (20,000) | a newer version in the register; LRU | never while a bridge run beats; register unknown: Pinot is asked |
| The version register | Django cache ``versions`` (Redis in production): ``order:<id>:<run>`` -> version, ``scope:<customer:id, restaurant:id, all>:<run>`` -> (ms, order, version), ``alive`` -> (run, ms, started) | a day's timeout; a run that stops beating is ignored after 5 s | unknown (never "unchanged") without a live run |
| ETA statistics | ``statistics._cache``: broker URL; Django cache ``default``: ``eta-statistics:v1:<url>:<window>`` | the refresh window's end (a background reload) | one window (``ETA_REFRESH_SECONDS``, 300 s), the same in every process |
| A rendered detail body | ``bodies._bodies``: the detail's content validator (2,000) | LRU only | never: the key names everything the body depends on (docs/api.md) |
| Budgets, socket slots, sign-in attempts | Django cache ``default`` (``counters.cache``) | their own timeouts | counters, not data |

The bounded map is cachetools' ``LRUCache`` (:mod:`tracker.cache.maps`), also for the push
bridge's per-order memory and each socket's versions. Django's caches are ``LocMemCache``
per process in ``make run``, Redis in production (``config/stores.py``), so the register
and the statistics work across processes. Subscriptions to the admin's saves are made in
this app's ``ready()`` (:mod:`tracker.cache.invalidation`).
"""
