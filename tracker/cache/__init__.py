"""The read side's cache: everything a process or Redis keeps so that a read costs less.

| What is kept | Under which key | What drops it | How stale it may be |
|---|---|---|---|
| An order's placed part (items, names, owner) | ``reads._placed``: order id (10,000 per process) | an admin save of its customer, restaurant or product (at once here, by notice elsewhere); LRU; a notice-listener resync | elsewhere until the notice is read (0.2 s poll); never used while the listener has not read for 2 s, except when the database cannot be reached, as the outage's answers below |
| A courier's name | ``reads._courier_names``: courier id (2,000) | an admin save of the courier or its user; LRU; resync | as above |
| An order's trail | ``reads._trails``: (order id, last position ms) (500) | LRU only: a trail only grows, a new point is a new key | never |
| An order's state (Pinot's row) | ``reads._states``: order id (20,000) | a newer version in the register; LRU | never while a bridge run beats; register unknown: Pinot is asked |
| The version register | Django cache ``versions`` (Redis in production): ``order:<id>:<run>`` -> version, ``scope:<customer:id, restaurant:id, all>:<run>`` -> (ms, order, version), ``alive`` -> (run, ms, started) | a day's timeout; a run that stops beating is ignored after 5 s | unknown (never "unchanged") without a live run |
| ETA statistics | ``statistics._cache``: broker URL; Django cache ``default``: ``eta-statistics:v1:<url>:<window>`` | the refresh window's end (a background reload) | one window (``ETA_REFRESH_SECONDS``, 300 s), the same in every process |
| A rendered detail body | ``bodies._bodies``: the detail's content validator (2,000) | LRU only | never: the key names everything the body depends on (docs/api.md) |
| A token's sign-in, for a database outage | ``outage._tokens``: SHA-256 of the key (never the key) -> user id; ``outage._users``: user id -> ``("sign-in", digest)`` -> the user's id, names and staff flags (20,000 users) | the user's access notice (password change, token deleted, deactivation, profile moved, staff removed, an order given to them: at once in the writing process, by notice elsewhere); a key that no longer signs in; the listener's resync (the database back); LRU | used only while the database cannot be reached, at most 60 s past the listener's last read (the outage's start, as this process knows it), and only if checked in the 10 minutes before it (``outage.OUTAGE_SECONDS``, ``KEEP_SECONDS``) |
| A policy answer, for a database outage: may see order N, a list's scope | ``outage._users``: user id -> ``("can_see", order)`` or ``("list_scope", role)`` -> the answer and the orders it names | the user's access notices; an order's (its customer or courier replaced, a shared link revoked) for the answers naming it; resync; LRU | as the sign-in; a courier's grace after delivery may be overrun by the answer's age (at most 11 minutes) |
| Push subscriptions known slow or hung (the notifier's) | ``notifier.Dispatcher._slow``: endpoint URL -> ``slow``/``hung`` (100,000) | a push to it that succeeds; 10 minutes; LRU | a subscription that answers again is treated as slow until its next push succeeds |
| A window told of an order on the road (the notifier's) | ``notifier.Notifier._told``: order id -> ``ToldWindow`` or none told (100,000) | this notifier telling or moving it; 60 s (another replica may move it after a rebalance); LRU | 60 s: a slip seen against an older window is refused by the window's own version (``slips``) and read again |
| Orders checked for "running late" lately (the notifier's) | ``notifier.Notifier._checked``: order id (100,000) | ``NOTIFY_LATE_CHECK_SECONDS`` (15 s); LRU | a slip is told up to that much later |
| Budgets, socket slots, sign-in attempts | Django cache ``default`` (``counters.cache``) | their own timeouts | counters, not data |
| One-time socket tickets | Django cache ``tickets`` (``counters.tickets``; Redis in production, files in ``var/cache/socket-tickets`` without it, so any web process redeems one): ``socket-ticket:<SHA-256 of the ticket>`` -> what it stands for | its redemption (the first delete wins); 30 s (``SOCKET_TICKET_SECONDS``) | never: used once |

The bounded map is cachetools' ``LRUCache`` (:mod:`tracker.cache.maps`), also for the push
bridge's per-order memory and each socket's versions; its expiring form for the notifier's. Django's caches are ``LocMemCache``
per process in ``make run``, Redis in production (``config/stores.py``), so the register
and the statistics work across processes. Subscriptions to the admin's saves are made in
this app's ``ready()`` (:mod:`tracker.cache.invalidation`).
"""
