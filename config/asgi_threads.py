"""Django's ASGI handler on a bounded set of long-lived request threads.

Django's :class:`~django.core.handlers.asgi.ASGIHandler` runs each request's sync code
(signals, middleware, DRF views) inside a fresh ``ThreadSensitiveContext``: a new
single-thread executor, so a new thread, and a new database connection, for every request
(a noticeable share of a short request's CPU: docs/performance.md). Here each request borrows one of a few long-lived
single-thread executors through the same asgiref context (``ThreadSensitiveContext(
executor=...)``, asgiref's own way to choose the thread), so:

* a request still runs all its sync code on one thread that no other request uses at the
  same time, as Django assumes (thread-local database connection, transactions, locale);
* that thread, and its database connection, serve the next request: Django's
  ``request_started``/``request_finished`` handlers (``close_old_connections``) still drop a
  connection that is too old, broken, or left inside a transaction, and a health check runs
  before a kept connection is reused (``CONN_HEALTH_CHECKS``). SQLite connections, short-
  lived elsewhere (see settings), are kept on these threads only: in autocommit a SQLite
  read sees every commit made before it starts, so a revoked token is refused at once;
* a worker has at most ``REQUEST_THREADS`` of them, so at most that many database
  connections for requests. A request that finds them all busy waits for one, without
  blocking the event loop, and the first to wait is the first served. Only
  ``REQUEST_QUEUE_MAX`` wait at once: the next is answered 503 at once; one that waits
  ``REQUEST_QUEUE_TIMEOUT_S`` is answered 503 then (both with ``Retry-After``, in the
  API's error shape under ``/api/``: :func:`config.asgi_limits.error_body`), and counted
  (``ordertrack_http_requests_shed_total``; ``ordertrack_http_requests_queued`` is the
  queue now). A client that leaves while it waits gives up its place. The body is read
  before a thread is taken, so a slow upload holds none;
* the middleware chain and the view run as one sync call on that thread, as under WSGI.
  Django's async chain instead hopped between the event loop and the thread four more
  times per request (our sync-only middleware sit between async-capable ones, and the
  sync view is called from the async core), each hop a wake-up of both sides;
* a body streamed from a sync iterator (WhiteNoise's static files, a ``FileResponse``) is
  read on that thread part by part. Django would read all of it into memory first, and
  warn each time, since it can only stream an async iterator.

Why wait instead of giving a request beyond the kept threads a thread of its own (this
module did until issue 55's run at 200/s: docs/performance.md): such a thread opens a
database connection for one request, a process forked by PostgreSQL (about 4 ms of its
CPU), exactly when the worker is busiest, and their number had no bound: every queued
request opened one, until PostgreSQL refused them all ("too many clients"). A small,
counted overflow was weighed and left out. The connections it would allow are better
spent as that many more kept threads (``WEB_REQUEST_THREADS``), whose connections are
reused. The case for it, a few slow requests holding every thread, is met otherwise:
each dependency's own timeout (Pinot's 5 s, Redis's 2 s) bounds how long a request holds
its thread, and the queue's timeout is longer. When a dependency is slow, most requests
wait on it, so an overflow would fill with them too. And a worker short of CPU (the
200/s case) gains nothing from more threads at once. uvicorn's ``--limit-concurrency``
is no substitute: it counts the long-lived WebSockets too, and refuses at once with a
bare 503.

WebSockets do not pass through here (Channels' consumers have their own threads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import ChainMap, deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.http import FileResponse, HttpRequest, HttpResponseBase
from prometheus_client import Counter, Gauge

from config.asgi_limits import error_body, send_refusal

log = logging.getLogger(__name__)

#: A file's body goes out in parts of about this size, each read in one hop to its thread.
FILE_PART_BYTES = 64 * 1024
#: Requests shed are logged at most once per this many seconds per worker (with a count):
#: under a flood, a line each would bury the log.
SHED_LOG_SECONDS = 10.0

QUEUED = Gauge(
    "ordertrack_http_requests_queued",
    "HTTP requests waiting for a request thread (all busy), over every web worker",
    multiprocess_mode="livesum",
)
SHED = Counter(
    "ordertrack_http_requests_shed_total",
    "HTTP requests answered 503 without running: too many already waiting for a request "
    "thread (full), or no thread came free in time (timeout)",
    ["reason"],
)
for _reason in ("full", "timeout"):
    SHED.labels(_reason)  # both series from the start, at 0, for rate() and alerts


def _keep_connections() -> None:
    """On a kept thread: its database connections live ``REQUEST_THREAD_CONN_MAX_AGE``
    seconds (checked when each request starts and ends), not one request, and are checked
    before the first query of each request, so one the server dropped while the thread was
    idle is replaced instead of failing that request. The rest of the settings are read
    through, so a later change to them (a test database) is seen."""
    for alias in connections:
        wrapper = connections[alias]  # this thread's own wrapper
        kept = {"CONN_MAX_AGE": settings.REQUEST_THREAD_CONN_MAX_AGE, "CONN_HEALTH_CHECKS": True}
        wrapper.settings_dict = ChainMap(kept, wrapper.settings_dict)


async def _read_on_request_thread(chunks: Iterator[bytes], at_least: int) -> AsyncIterator[bytes]:
    """A sync iterator's chunks, joined to ``at_least`` bytes (or its end) per hop to the
    request's thread, so no file read blocks the event loop and no more than one part is
    held. Chunks that are not a file's go one per hop: such an iterator may be waiting
    for what it yields next, and its client should get each chunk as it comes."""

    def read() -> bytes:
        part: list[bytes] = []
        size = 0
        for chunk in chunks:
            part.append(chunk)
            size += len(chunk)
            if size >= at_least:
                break
        return b"".join(part)

    read_on_thread = sync_to_async(read, thread_sensitive=True)
    while part := await read_on_thread():
        yield part


class Shed(Exception):
    """A request refused before it ran: too many waiting (``full``), or waited too long
    (``timeout``)."""


class RequestThreads:
    """One worker's kept request threads, lent to one request at a time.

    Threads start as they are first needed, up to ``threads``; a borrower that finds them
    all lent waits, in arrival order, for the next one given back. At most ``queue_max``
    wait at once, each at most ``queue_timeout_s`` (:class:`Shed` otherwise). Used from the
    event loop's thread only, so its state needs no lock.
    """

    def __init__(self, threads: int, queue_max: int, queue_timeout_s: float) -> None:
        self.threads = threads
        self.queue_max = queue_max
        self.queue_timeout_s = queue_timeout_s
        self._created = 0
        # Last in, first out: the busiest threads stay warm, idle ones keep their connection.
        self._free: list[ThreadPoolExecutor] = []
        self._waiting: deque[asyncio.Future[ThreadPoolExecutor]] = deque()
        self._shed_unlogged = 0
        self._shed_logged_at = float("-inf")

    def take_free(self) -> ThreadPoolExecutor | None:
        """A thread at once if one is idle or may still be started; else None. Nobody is
        waiting while one is idle (:meth:`give_back` hands it to the first waiter)."""
        if self._free:
            return self._free.pop()
        if self._created < self.threads:
            self._created += 1
            return ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix=f"request-{self._created}",
                initializer=_keep_connections,
            )
        return None

    async def wait_for_one(self) -> ThreadPoolExecutor:
        """The next thread given back, after those who came first; :class:`Shed` when
        ``queue_max`` already wait, or when none came in ``queue_timeout_s``."""
        if len(self._waiting) >= self.queue_max:
            raise self._shed("full")
        waiter: asyncio.Future[ThreadPoolExecutor] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        QUEUED.inc()
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                return await waiter
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return waiter.result()  # handed over as the time ran out: serve it
            raise self._shed("timeout") from None
        except BaseException:  # cancelled: the client left, the server is stopping
            if waiter.done() and not waiter.cancelled():
                self.give_back(waiter.result())  # handed over meanwhile: to the next one
            raise
        finally:
            QUEUED.dec()
            if not waiter.done():
                waiter.cancel()
            if waiter in self._waiting:  # left before its turn (not handed a thread)
                self._waiting.remove(waiter)

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """The thread to the first request still waiting, or back to the idle ones."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(executor)
                return
        self._free.append(executor)

    def abandon(self, waiting: asyncio.Future[ThreadPoolExecutor]) -> None:
        """Stop a wait (a task of :meth:`wait_for_one`) whose request will not run; a thread
        it got anyway goes to the next request, and a refusal it got is dropped."""
        waiting.cancel()  # nothing, if it has ended

        def pass_on(ended: asyncio.Future[ThreadPoolExecutor]) -> None:
            if not ended.cancelled() and ended.exception() is None:
                self.give_back(ended.result())

        waiting.add_done_callback(pass_on)

    def close(self) -> None:
        """Close the idle threads' database connections and end those threads (a
        database cannot be dropped while a kept connection is open: the tests' teardown)."""
        while self._free:
            executor = self._free.pop()
            executor.submit(connections.close_all).result()
            executor.shutdown()
            self._created -= 1

    def _shed(self, reason: str) -> Shed:
        SHED.labels(reason).inc()
        self._shed_unlogged += 1
        now = time.monotonic()
        if now - self._shed_logged_at >= SHED_LOG_SECONDS:
            log.warning(
                "503: %d request(s) shed by this worker since its last report (the last: "
                "%s): all %d request threads busy, %d waiting (at most %d, for %g s each)",
                self._shed_unlogged, reason, self.threads, len(self._waiting),
                self.queue_max, self.queue_timeout_s,
            )  # fmt: skip
            self._shed_unlogged = 0
            self._shed_logged_at = now
        return Shed(reason)


class _BodyRead:
    """A request's ``receive`` once its body has been read (before its thread was
    taken): :meth:`PooledThreadASGIHandler.read_body` hands Django that body."""

    def __init__(self, receive: Any, body_file: SpooledTemporaryFile) -> None:
        self.receive = receive
        self.body_file = body_file

    async def __call__(self) -> dict:
        return await self.receive()


class PooledThreadASGIHandler(ASGIHandler):
    """Django's handler, serving each HTTP request on a borrowed long-lived thread, or
    waiting for one (:class:`RequestThreads`)."""

    def __init__(self, threads: int, queue_max: int, queue_timeout_s: float) -> None:
        super().__init__()
        self.threads = RequestThreads(threads, queue_max, queue_timeout_s)

    def load_middleware(self, is_async: bool = False) -> None:
        """The sync chain (``is_async`` is ignored): see :meth:`get_response_async`."""
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        """The whole sync chain in one hop to the request's thread."""
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        """Django's, with a sync streaming body read part by part on the request's thread
        (an async iterator over it, as Django's streaming responses allow)."""
        if response.streaming and not response.is_async:
            at_least = FILE_PART_BYTES if isinstance(response, FileResponse) else 1
            response.streaming_content = _read_on_request_thread(
                response.streaming_content, at_least
            )
        await super().send_response(response, send)

    async def read_body(self, receive: Any) -> SpooledTemporaryFile:
        """The body already read by :meth:`__call__`, or Django's reading of it."""
        if isinstance(receive, _BodyRead):
            return receive.body_file
        return await super().read_body(receive)

    def close(self) -> None:
        """Close the idle threads and their database connections (:meth:`RequestThreads.close`)."""
        self.threads.close()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        try:
            body_file = await super().read_body(receive)  # on the event loop, as Django does
        except RequestAborted:
            return
        executor = self.threads.take_free()
        if executor is None:  # every thread busy: wait for one
            try:
                executor = await self._wait_for_thread(receive)
            except Shed:
                body_file.close()
                await self._refuse(scope, send)
                return
            except RequestAborted:  # the client left while it waited
                body_file.close()
                return
        try:
            # Always a context of this request's own, given its executor: a context without
            # one would defer to any context this task inherited, and uvicorn starts a
            # pipelined request's task from inside the previous request's send(), so it
            # inherits that request's context, already exited by the time it runs.
            # The context ends only after handle() awaited everything it started, so the
            # thread is free for the next request when it goes back.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, _BodyRead(receive, body_file), send)
        finally:
            self.threads.give_back(executor)

    async def _wait_for_thread(self, receive: Any) -> ThreadPoolExecutor:
        """:meth:`RequestThreads.wait_for_one`, given up (RequestAborted) if the client
        disconnects meanwhile: Django listens for that only once the request runs."""
        waiting = asyncio.ensure_future(self.threads.wait_for_one())
        listening = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait((waiting, listening), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this request cancelled: the server is stopping
            listening.cancel()
            self.threads.abandon(waiting)
            raise
        if not listening.done():
            listening.cancel()
            return await waiting  # done: its thread, or Shed
        self.threads.abandon(waiting)
        listening.result()  # the client left: RequestAborted
        raise RequestAborted  # listen_for_disconnect ends only by raising

    async def _refuse(self, scope: dict, send: Any) -> None:
        """503 + ``Retry-After``, as the API answers for what is unavailable
        (:mod:`api.errors`; imported here, once Django is set up)."""
        from api.errors import UNAVAILABLE_RETRY_AFTER_S

        message = "The server is too busy to answer now; retry shortly."
        body, content_type = error_body(scope.get("path", ""), 503, "unavailable", message)
        retry_after = ((b"retry-after", str(UNAVAILABLE_RETRY_AFTER_S).encode()),)
        await send_refusal(send, 503, body, content_type, retry_after)


def get_asgi_application() -> PooledThreadASGIHandler:
    """Django's ``get_asgi_application`` with the pooled handler."""
    import django

    django.setup(set_prefix=False)
    return PooledThreadASGIHandler(
        settings.REQUEST_THREADS, settings.REQUEST_QUEUE_MAX, settings.REQUEST_QUEUE_TIMEOUT_S
    )
