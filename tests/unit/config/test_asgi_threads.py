"""HTTP requests through the ASGI handler run on a few kept threads (config/asgi_threads.py):
one request at a time per thread, its database connection kept, and credentials still
checked against the database's latest state on every request. A request that finds every
thread busy waits for one, in arrival order, opening no connection of its own; too many
waiting, or waiting too long, is a 503 with ``Retry-After`` before any of Django runs."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import connection, connections
from django.db.backends.signals import connection_created
from prometheus_client import REGISTRY

from config.asgi_threads import FILE_PART_BYTES, PooledThreadASGIHandler
from tests.factories import make_customer
from tests.waiting import wait_until_async

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

Headers = tuple[tuple[bytes, bytes], ...]
#: Sent with a request, holds its thread (see :class:`Hold`).
HOLD: Headers = ((b"x-hold", b"1"),)


def number(n: int | str) -> Headers:
    """A request's name, noted by :class:`Hold` when it starts."""
    return ((b"x-n", str(n).encode()),)


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


class Hold:
    """A slow request, as a slow view or a slow dependency makes one: a ``request_started``
    receiver, which Django runs on the request's own thread, keeps a request sent with
    :data:`HOLD` there until :meth:`release`. Notes the order requests started in (each
    by its :func:`number`, ``""`` without one): a request that never started never ran
    any of Django."""

    def __init__(self) -> None:
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.held = 0
        self.started: list[str] = []

    def __call__(self, **kwargs) -> None:
        headers = dict(kwargs["scope"]["headers"])
        with self._lock:
            self.started.append(headers.get(b"x-n", b"").decode())
            if headers.get(b"x-hold") != b"1":
                return
            self.held += 1
        self._released.wait(30)  # a failing test does not hang the run

    def release(self) -> None:
        self._released.set()


@pytest.fixture
def hold():
    holder = Hold()
    request_started.connect(holder, weak=False)
    yield holder
    holder.release()
    request_started.disconnect(holder)


async def until(condition: Callable[[], bool], message: str) -> None:
    """Poll ``condition`` (on the event loop) until true; fail with ``message`` after 10 s."""

    async def check() -> bool:
        return condition()

    await wait_until_async(check, 10, message, interval=0.01)


def queued() -> float:
    """Requests waiting for a request thread now (the gauge operators see)."""
    return REGISTRY.get_sample_value("ordertrack_http_requests_queued") or 0.0


def shed(reason: str) -> float:
    """Requests answered 503 before running, for ``reason``, so far."""
    value = REGISTRY.get_sample_value("ordertrack_http_requests_shed_total", {"reason": reason})
    return value or 0.0


def authorization(token: str) -> Headers:
    return ((b"authorization", f"Token {token}".encode()),)


async def get(
    app: PooledThreadASGIHandler,
    path: str,
    token: str,
    gate: asyncio.Event | None = None,
    extra: Headers = (),
) -> int:
    """One GET through the ASGI app; ``gate`` holds the request body back until it is set."""
    status, _ = await exchange(app, path, headers=(*authorization(token), *extra), gate=gate)
    return status


async def send_request(
    app: PooledThreadASGIHandler,
    path: str,
    *,
    method: str = "GET",
    headers: Headers = (),
    gate: asyncio.Event | None = None,
    leave: asyncio.Event | None = None,
) -> list[dict]:
    """One request through the ASGI app: every message it sent back. ``gate`` holds the
    request body back until it is set; once ``leave`` is set, the client disconnects."""
    sent: list[dict] = []
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if delivered:  # Django listens for a disconnect: the client stays, or leaves
            await (leave or asyncio.Event()).wait()
            return {"type": "http.disconnect"}
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
    return sent


async def exchange(
    app: PooledThreadASGIHandler,
    path: str,
    *,
    method: str = "GET",
    headers: Headers = (),
    gate: asyncio.Event | None = None,
) -> tuple[int, list[bytes]]:
    """One request through the ASGI app: its status and the body of each message sent."""
    sent = await send_request(app, path, method=method, headers=headers, gate=gate)
    return sent[0]["status"], [message.get("body", b"") for message in sent[1:]]


@pytest_asyncio.fixture
async def handler():
    """A handler with the given number of kept threads (and the settings' queue unless
    given), closed after the test with the connection of the thread this test's own ORM
    calls ran on (PostgreSQL cannot drop the test database while one is open)."""
    made: list[PooledThreadASGIHandler] = []

    def make(
        threads: int,
        queue_max: int | None = None,
        queue_timeout_s: float | None = None,
    ) -> PooledThreadASGIHandler:
        if queue_max is None:
            queue_max = settings.REQUEST_QUEUE_MAX
        if queue_timeout_s is None:
            queue_timeout_s = settings.REQUEST_QUEUE_TIMEOUT_S
        made.append(PooledThreadASGIHandler(threads, queue_max, queue_timeout_s))
        return made[-1]

    yield make
    for app in made:
        app.close()
    await sync_to_async(connections.close_all)()


@sync_to_async
def customer_token(username: str = "alice") -> str:
    from tracker.accounts.services import issue_token

    return issue_token(make_customer(username).user).key


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

    from tracker.accounts.models import ApiToken
    from tracker.sharing.tokens import digest

    app = handler(1)
    token = await customer_token()
    assert await get(app, "/api/v1/me/", token) == 200
    await sync_to_async(lambda: ApiToken.objects.filter(digest=digest(token)).delete())()
    assert await get(app, "/api/v1/me/", token) == 401

    token = await customer_token("bob")
    assert await get(app, "/api/v1/me/", token) == 200
    user_id = await sync_to_async(lambda: ApiToken.objects.get(digest=digest(token)).user_id)()
    await sync_to_async(
        lambda: get_user_model().objects.filter(pk=user_id).update(is_active=False)
    )()
    assert await get(app, "/api/v1/me/", token) == 401


async def test_a_request_still_sending_its_body_holds_no_thread(recorder, handler):
    """The body is read before a thread is taken: a slow upload keeps no one waiting."""
    app = handler(1)
    token = await customer_token()
    gate = asyncio.Event()
    uploading = asyncio.create_task(get(app, "/api/v1/me/", token, gate))
    await asyncio.sleep(0.05)
    assert await asyncio.wait_for(get(app, "/api/v1/me/", token), 10) == 200  # served meanwhile
    gate.set()
    assert await uploading == 200
    (first, _), (second, _) = recorder.seen
    assert first == second and first.startswith("request-")


async def test_a_request_beyond_the_kept_threads_waits_for_one_and_opens_no_connection(
    handler, hold
):
    app = handler(2)
    token = await customer_token()
    threads_before = {thread.name for thread in threading.enumerate()}
    opened: list[str] = []

    def note(**kwargs) -> None:
        opened.append(threading.current_thread().name)

    connection_created.connect(note, weak=False)
    try:
        held = [asyncio.create_task(get(app, "/api/v1/me/", token, extra=HOLD)) for _ in range(2)]
        await until(lambda: hold.held == 2, "both kept threads held")
        base = queued()
        third = asyncio.create_task(get(app, "/api/v1/me/", token))
        await until(lambda: queued() == base + 1, "the third request waiting")
        await asyncio.sleep(0.2)
        assert not third.done()  # it waits: it does not run beside them
        hold.release()
        assert await asyncio.gather(*held, third) == [200, 200, 200]
    finally:
        connection_created.disconnect(note)
    assert queued() == base
    # One connection per kept thread, opened there; none for the request that waited.
    by_new_threads = [name for name in opened if name not in threads_before]
    assert len(by_new_threads) == 2 and len(set(by_new_threads)) == 2
    assert all(name.startswith("request-") for name in by_new_threads)


async def test_requests_waiting_for_a_thread_are_served_in_arrival_order(handler, hold):
    app = handler(1)
    token = await customer_token()
    first = asyncio.create_task(get(app, "/api/v1/me/", token, extra=(*HOLD, *number(0))))
    await until(lambda: hold.held == 1, "the kept thread held")
    base = queued()
    waiting = []
    for n in (1, 2, 3):
        waiting.append(asyncio.create_task(get(app, "/api/v1/me/", token, extra=number(n))))
        await until(lambda n=n: queued() == base + n, f"request {n} waiting")
    hold.release()
    assert await asyncio.gather(first, *waiting) == [200, 200, 200, 200]
    assert hold.started == ["0", "1", "2", "3"]


def _answer(sent: list[dict]) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers and whole body of what the app sent."""
    start, *bodies = sent
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in bodies)


async def test_a_request_that_waits_too_long_for_a_thread_gets_503_with_retry_after(handler, hold):
    """The API's error shape under /api/, plain text elsewhere, as the API and the login
    throttle answer 503 once Django runs (api/errors.py, config/middleware.py)."""
    from api.errors import UNAVAILABLE_RETRY_AFTER_S

    app = handler(1, queue_timeout_s=0.3)
    token = await customer_token()
    held = asyncio.create_task(get(app, "/api/v1/me/", token, extra=HOLD))
    await until(lambda: hold.held == 1, "the kept thread held")
    before = shed("timeout")
    started = time.monotonic()
    api, page = await asyncio.gather(
        send_request(app, "/api/v1/me/", headers=authorization(token)),
        send_request(app, "/"),
    )
    waited = time.monotonic() - started
    hold.release()
    assert await held == 200

    assert waited >= 0.29  # it waited its queue timeout (the held thread never came free)
    status, headers, body = _answer(api)
    assert status == 503 and headers[b"retry-after"] == str(UNAVAILABLE_RETRY_AFTER_S).encode()
    assert headers[b"content-type"] == b"application/json"
    error = json.loads(body)["error"]
    assert error["status"] == 503 and error["code"] == "unavailable" and error["message"]
    status, headers, body = _answer(page)
    assert status == 503 and headers[b"retry-after"] == str(UNAVAILABLE_RETRY_AFTER_S).encode()
    assert headers[b"content-type"].startswith(b"text/plain")
    assert body.decode() == error["message"]
    assert shed("timeout") == before + 2
    assert hold.started == [""]  # neither refused request ran any of Django


async def test_a_request_beyond_the_queue_gets_503_at_once(handler, hold):
    from api.errors import UNAVAILABLE_RETRY_AFTER_S

    app = handler(1, queue_max=2)
    token = await customer_token()
    held = asyncio.create_task(get(app, "/api/v1/me/", token, extra=HOLD))
    await until(lambda: hold.held == 1, "the kept thread held")
    base = queued()
    waiting = [asyncio.create_task(get(app, "/api/v1/me/", token)) for _ in range(2)]
    await until(lambda: queued() == base + 2, "two requests waiting")
    before = shed("full")
    # Answered while the thread is still held: not after a wait (10 s by default).
    sent = await asyncio.wait_for(send_request(app, "/api/v1/me/", headers=authorization(token)), 2)
    status, headers, body = _answer(sent)
    assert status == 503 and headers[b"retry-after"] == str(UNAVAILABLE_RETRY_AFTER_S).encode()
    assert json.loads(body)["error"]["code"] == "unavailable"
    assert shed("full") == before + 1
    assert queued() == base + 2 and not held.done()
    hold.release()
    assert await asyncio.gather(held, *waiting) == [200, 200, 200]
    assert queued() == base


async def test_a_client_that_leaves_while_waiting_gives_up_its_place(handler, hold):
    app = handler(1)
    token = await customer_token()
    held = asyncio.create_task(get(app, "/api/v1/me/", token, extra=HOLD))
    await until(lambda: hold.held == 1, "the kept thread held")
    base = queued()
    leave = asyncio.Event()
    leaving = (*authorization(token), *number("gone"))
    gone = asyncio.create_task(send_request(app, "/api/v1/me/", headers=leaving, leave=leave))
    await until(lambda: queued() == base + 1, "the leaving request waiting")
    after = asyncio.create_task(get(app, "/api/v1/me/", token, extra=number("after")))
    await until(lambda: queued() == base + 2, "the next request waiting")
    leave.set()
    assert await asyncio.wait_for(gone, 5) == []  # nobody left to answer
    await until(lambda: queued() == base + 1, "the leaving request out of the queue")
    hold.release()
    assert await held == 200 and await after == 200
    assert hold.started == ["", "after"]  # the one that left never ran


@pytest.mark.parametrize("kept_thread_busy", [False, True])
async def test_a_request_started_inside_a_finished_requests_context_is_served(
    handler, hold, kept_thread_busy
):
    """uvicorn starts a pipelined request's task from the previous request's ``send()``,
    so the new task inherits that request's thread context, which has exited by the time
    the new request runs (a 500 in the kitchen board's first read, seen in CI). With the
    thread busy, it waits for it, and then runs in a context of its own too."""
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import ThreadSensitiveContext

    app = handler(1)
    token = await customer_token()
    held = None
    if kept_thread_busy:
        held = asyncio.create_task(get(app, "/api/v1/me/", token, extra=HOLD))
        await until(lambda: hold.held == 1, "the kept thread held")
    base = queued()
    previous_request_done = asyncio.Event()

    async def pipelined() -> int:
        await previous_request_done.wait()
        return await get(app, "/api/v1/me/", token)

    with ThreadPoolExecutor(max_workers=1) as executor:
        async with ThreadSensitiveContext(executor=executor):
            task = asyncio.create_task(pipelined())
    previous_request_done.set()
    if held is not None:
        await until(lambda: queued() == base + 1, "the pipelined request waiting")
        hold.release()
        assert await held == 200
    assert await task == 200


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
