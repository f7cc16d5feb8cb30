"""Right after Redis restarts, requests and WebSocket joins work again (the fault drill's
Redis fault, docs/reliability.md).

Each process keeps pools of connections to Redis: Django's cache (the throttles' counters,
the version register) and channels_redis (WebSocket joins and pushes). A restart closes
every one of them. A pool must replace a closed connection before handing it out rather
than fail the request that draws it (config/stores.py). A real ``redis-server`` is
stopped and started again on the same port while the pools hold several connections,
with the settings production builds from ``REDIS_URL`` (``on_redis``, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from channels.layers import get_channel_layer
from django.core.cache import caches
from django.db import connections
from rest_framework.test import APIClient

from tests.factories import make_customer

#: Connections each pool holds when Redis restarts, and requests in flight after it.
CONCURRENT = 8


def fill_cache_pools(size: int) -> None:
    """Make each Redis cache's pool hold ``size`` connections, as that many requests at
    once leave it."""
    for alias in ("default", "versions"):
        pool = caches[alias]._cache.get_client(write=True).connection_pool
        held = [pool.get_connection() for _ in range(size)]
        for connection in held:
            pool.release(connection)


def at_once(work, count: int) -> list[BaseException]:
    """Run ``work(i)`` for ``i`` in ``range(count)`` on as many threads, started together;
    what each raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


@pytest.mark.django_db(transaction=True)
def test_rest_reads_answer_right_after_redis_restarts(on_redis):
    users = [make_customer(f"reader{i}").user for i in range(CONCURRENT)]
    fill_cache_pools(CONCURRENT)
    assert on_redis.clients() >= 2 * CONCURRENT

    on_redis.restart()

    codes: list[int] = []

    def read(i: int) -> None:
        client = APIClient()
        client.force_authenticate(users[i])
        for _ in range(3):  # each read spends the user's read budget: a get and a set
            codes.append(client.get("/api/v1/me/").status_code)

    assert at_once(read, CONCURRENT) == []
    assert codes == [200] * (3 * CONCURRENT)
    # Budgets kept in Redis: one per reader, counted in 1 s buckets (a reader's reads may
    # straddle a second, so it may hold two).
    readers = {key.rsplit(b":", 1)[0] for key in on_redis.keys("*throttle_reads_*")}
    assert len(readers) == CONCURRENT


def test_the_version_register_answers_right_after_redis_restarts(on_redis):
    """Its readers take an error for "unknown" and ask Pinot (tracker/cache/reads.py),
    so a failure would not show as an error: the register itself must answer."""
    register = caches["versions"]
    register.set("alive", ("run", 1), 60)
    fill_cache_pools(CONCURRENT)

    on_redis.restart()

    def use(i: int) -> None:
        register.set_many({f"order:{i}:run": i}, timeout=60)
        assert register.get(f"order:{i}:run") == i

    assert at_once(use, CONCURRENT) == []


@pytest.mark.asyncio
async def test_websocket_joins_and_pushes_work_right_after_redis_restarts(on_redis):
    layer = get_channel_layer()
    try:
        joins = [layer.group_add(f"order-{i}", f"specific.warm!{i}") for i in range(32)]
        await asyncio.gather(*joins)
        assert await asyncio.to_thread(on_redis.clients) >= CONCURRENT

        await asyncio.to_thread(on_redis.restart)

        socket = await layer.new_channel()
        joins = [layer.group_add(f"order-{i}", socket) for i in range(32)]
        outcomes = await asyncio.gather(*joins, return_exceptions=True)
        assert [o for o in outcomes if isinstance(o, BaseException)] == []
        await layer.group_send("order-7", {"type": "order.update", "version": 7})
        message = await asyncio.wait_for(layer.receive(socket), 5)
        assert message == {"type": "order.update", "version": 7}
    finally:
        await layer.close_pools()


@pytest.mark.asyncio
async def test_a_quiet_socket_keeps_waiting_past_the_layers_blocking_read(on_redis):
    """A socket with nothing to receive waits in BZPOPMIN rounds of ``brpop_timeout``
    seconds; no round may end the wait with an error."""
    layer = get_channel_layer()
    try:
        socket = await layer.new_channel()
        waiting = asyncio.ensure_future(layer.receive(socket))
        await asyncio.sleep(layer.brpop_timeout + 1.5)
        assert not waiting.done(), waiting.exception()
        await layer.send(socket, {"type": "order.update", "version": 1})
        assert await asyncio.wait_for(waiting, 5) == {"type": "order.update", "version": 1}
    finally:
        await layer.close_pools()
