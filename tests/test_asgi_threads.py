"""HTTP requests through the ASGI handler run on a few kept threads (config/asgi_threads.py):
one request at a time per thread, its database connection kept, and credentials still
checked against the database's latest state on every request."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.signals import request_finished
from django.db import connection, connections

from config.asgi_threads import PooledThreadASGIHandler
from tests.factories import make_customer

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class Recorder:
    """Where each request finished: its thread's name, its database connection, and how
    long that connection is still to be kept (Django closes it at the request's end when
    that time has passed)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int | None]] = []
        self.kept_for: list[float] = []

    def __call__(self, **kwargs) -> None:
        raw = connection.connection
        self.seen.append((threading.current_thread().name, id(raw) if raw else None))
        self.kept_for.append((connection.close_at or 0.0) - time.monotonic())


@pytest.fixture
def recorder():
    rec = Recorder()
    request_finished.connect(rec, weak=False)
    yield rec
    request_finished.disconnect(rec)


async def get(
    app: PooledThreadASGIHandler, path: str, token: str, gate: asyncio.Event | None = None
) -> int:
    """One GET through the ASGI app; ``gate`` holds the request body back until it is set."""
    sent: list[dict] = []
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if delivered:  # Django listens for a disconnect: the client stays
            await asyncio.Event().wait()
        if gate is not None:
            await gate.wait()
        delivered = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
        "headers": [(b"host", b"testserver"), (b"authorization", f"Token {token}".encode())],
    }  # fmt: skip
    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return sent[0]["status"]


@pytest_asyncio.fixture
async def handler():
    """A handler with the given number of kept threads, closed after the test with the
    connection of the thread this test's own ORM calls ran on (PostgreSQL cannot drop the
    test database while one is open)."""
    made: list[PooledThreadASGIHandler] = []

    def make(threads: int) -> PooledThreadASGIHandler:
        made.append(PooledThreadASGIHandler(threads))
        return made[-1]

    yield make
    for app in made:
        app.close()
    await sync_to_async(connections.close_all)()


@sync_to_async
def customer_token(username: str = "alice") -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=make_customer(username).user).key


async def test_requests_one_after_another_reuse_one_kept_thread_and_its_connection(
    recorder, handler
):
    app = handler(2)
    token = await customer_token()
    assert [await get(app, "/api/v1/me/", token) for _ in range(3)] == [200, 200, 200]
    threads = {name for name, _ in recorder.seen}
    connections = {conn for _, conn in recorder.seen}
    assert len(threads) == 1 and next(iter(threads)).startswith("request-")
    assert len(connections) == 1 and None not in connections
    # On SQLite too, whose connections elsewhere last one use (see settings).
    assert all(left > settings.REQUEST_THREAD_CONN_MAX_AGE / 2 for left in recorder.kept_for)


async def test_a_revoked_token_or_deactivated_user_is_refused_on_the_very_next_request(handler):
    """The kept connection reads what other connections committed since its last request."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    app = handler(1)
    token = await customer_token()
    assert await get(app, "/api/v1/me/", token) == 200
    await sync_to_async(lambda: Token.objects.filter(key=token).delete())()
    assert await get(app, "/api/v1/me/", token) == 401

    token = await customer_token("bob")
    assert await get(app, "/api/v1/me/", token) == 200
    user_id = await sync_to_async(lambda: Token.objects.get(key=token).user_id)()
    await sync_to_async(
        lambda: get_user_model().objects.filter(pk=user_id).update(is_active=False)
    )()
    assert await get(app, "/api/v1/me/", token) == 401


async def test_concurrent_requests_beyond_the_kept_threads_run_on_a_thread_of_their_own(
    recorder, handler
):
    app = handler(1)
    token = await customer_token()
    gate = asyncio.Event()
    held = asyncio.create_task(get(app, "/api/v1/me/", token, gate))  # holds the kept thread
    await asyncio.sleep(0)
    assert await get(app, "/api/v1/me/", token) == 200  # served meanwhile
    gate.set()
    assert await held == 200
    assert await get(app, "/api/v1/me/", token) == 200
    (extra, _), (kept, _), (again, _) = recorder.seen
    assert kept.startswith("request-") and again == kept
    assert not extra.startswith("request-")


@pytest.mark.parametrize("kept_thread_busy", [False, True])
async def test_a_request_started_inside_a_finished_requests_context_is_served(
    handler, kept_thread_busy
):
    """uvicorn starts a pipelined request's task from the previous request's ``send()``,
    so the new task inherits that request's thread context, which has exited by the time
    the new request runs (a 500 in the kitchen board's first read, seen in CI)."""
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import ThreadSensitiveContext

    app = handler(1)
    token = await customer_token()
    gate = asyncio.Event()
    held = None
    if kept_thread_busy:
        held = asyncio.create_task(get(app, "/api/v1/me/", token, gate))
        await asyncio.sleep(0)
    previous_request_done = asyncio.Event()

    async def pipelined() -> int:
        await previous_request_done.wait()
        return await get(app, "/api/v1/me/", token)

    with ThreadPoolExecutor(max_workers=1) as executor:
        async with ThreadSensitiveContext(executor=executor):
            task = asyncio.create_task(pipelined())
    previous_request_done.set()
    assert await task == 200
    gate.set()
    if held is not None:
        assert await held == 200
