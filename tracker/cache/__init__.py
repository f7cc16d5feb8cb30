"""The read side's cache: everything a process or Redis keeps so that a read costs less.

=========================  ==============================  ===============================  ================================
What is kept               Under which key                 What drops it                    How stale it may be
=========================  ==============================  ===============================  ================================
An order's placed part     ``reads._placed``: order id     an admin save of its customer,   never: dropped by the notice
(items, names, owner)      (10,000 per process)            restaurant, product (notices);   (0.2 s poll) before it is used,
                                                           LRU; a listener resync           unused while the listener lags
A courier's name           ``reads._courier_names``: id    an admin save of the courier     as above
                           (2,000)                         or its user; LRU; resync
An order's trail           ``reads._trails``:              LRU only (a trail only grows;    never: the key moves with the
                           (order id, last point ms)       a new point is a new key)        state's last position
An order's state (Pinot)   ``reads._states``: order id     a newer version in the           never while the bridge beats;
                           (20,000)                        register; LRU                    unknown register: Pinot is read
The version register       Django cache ``versions``:      a day's timeout; a bridge run    a bridge run's heartbeat, 5 s
                           ``order:<id>:<run>``, ``alive``  that stops beating is ignored    (then: unknown, never unchanged)
                           (Redis in production)
ETA statistics             ``statistics._cache``: broker   the refresh window ends          one window (``ETA_REFRESH_SECONDS``,
                           URL; Django cache ``default``:  (background reload)              300 s): every process predicts
                           ``eta-statistics:v1:<url>:<w>``                                  from the same window
A rendered detail body     ``bodies._bodies``: the         LRU only (2,000)                 never: the key names all the
                           detail's content validator                                       body depends on (docs/api.md)
Budgets, slots, attempts   Django cache ``default``         their own timeouts               not a cache of data: counters
                           (``counters.cache``)
=========================  ==============================  ===============================  ================================

The bounded map is cachetools' ``LRUCache`` (:mod:`tracker.cache.maps`), also for the push
bridge's per-order memory and each socket's versions. Django's caches are ``LocMemCache``
per process in ``make run``, Redis in production (``config/stores.py``), so the register
and the statistics work across processes. Subscriptions to the admin's saves are made in
this app's ``ready()`` (:mod:`tracker.cache.invalidation`).
"""
