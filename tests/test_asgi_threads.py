"""HTTP requests through the ASGI handler run on a few kept threads (config/asgi_threads.py):
one request at a time per thread, its database connection kept, and credentials still
checked against the database's latest state on every request."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.signals import request_finished
from django.db import connection, connections

from config.asgi_threads import FILE_PART_BYTES, PooledThreadASGIHandler
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
    authorization = (b"authorization", f"Token {token}".encode())
    status, _ = await exchange(app, path, headers=(authorization,), gate=gate)
    return status


async def exchange(
    app: PooledThreadASGIHandler,
    path: str,
    *,
    method: str = "GET",
    headers: tuple[tuple[bytes, bytes], ...] = (),
    gate: asyncio.Event | None = None,
) -> tuple[int, list[bytes]]:
    """One request through the ASGI app: its status and the body of each message sent."""
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
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
        "headers": [(b"host", b"testserver"), *headers],
    }  # fmt: skip
    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return sent[0]["status"], [message.get("body", b"") for message in sent[1:]]


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


#: Django's own, so always there (WhiteNoise finds it as the pages' assets are found);
#: over 300 KiB, several parts.
STATIC_FILE = "admin/js/vendor/xregexp/xregexp.js"


def _streaming_warnings(recwarn) -> list[str]:
    return [str(w.message) for w in recwarn if "StreamingHttpResponse" in str(w.message)]


async def test_a_static_file_is_served_whole_with_no_streaming_warning(handler, recwarn):
    """WhiteNoise answers with a sync file iterator, which Django's handler would read
    whole into memory, warning each time; here it goes out part by part."""
    from django.contrib.staticfiles import finders

    app = handler(1)
    on_disk = Path(finders.find(STATIC_FILE)).read_bytes()
    assert len(on_disk) > 4 * FILE_PART_BYTES
    status, bodies = await exchange(app, f"/static/{STATIC_FILE}")
    assert status == 200 and b"".join(bodies) == on_disk
    status, bodies = await exchange(app, f"/static/{STATIC_FILE}", method="HEAD")
    assert status == 200 and b"".join(bodies) == b""
    ranged = ((b"range", b"bytes=100-199"),)
    status, bodies = await exchange(app, f"/static/{STATIC_FILE}", headers=ranged)
    assert status == 206 and b"".join(bodies) == on_disk[100:200]
    assert _streaming_warnings(recwarn) == []


async def test_a_file_is_read_off_the_event_loop_and_a_generator_sent_chunk_by_chunk(
    handler, recwarn
):
    from django.http import FileResponse, StreamingHttpResponse

    class Recorded(io.BytesIO):
        """Notes the thread of each read."""

        def __init__(self, data: bytes) -> None:
            super().__init__(data)
            self.threads: set[str] = set()

        def read(self, size: int | None = -1) -> bytes:
            self.threads.add(threading.current_thread().name)
            return super().read(size)

    app = handler(1)
    data = bytes(range(256)) * 1000
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    recorded = Recorded(data)
    await app.send_response(FileResponse(recorded), send)
    assert b"".join(message.get("body", b"") for message in sent[1:]) == data
    assert recorded.threads and threading.current_thread().name not in recorded.threads
    # A generator may be waiting for its next chunk: what it has yielded goes out first.
    sent.clear()
    await app.send_response(StreamingHttpResponse(iter([b"first", b"", b"second"])), send)
    assert [message.get("body") for message in sent[1:]] == [b"first", b"second", None]
    assert _streaming_warnings(recwarn) == []
