"""Django's ASGI handler on long-lived request threads instead of a new thread per request.

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
* when every kept thread is busy, a request gets Django's usual thread of its own, whose
  connections are closed when it ends;
* the middleware chain and the view run as one sync call on that thread, as under WSGI.
  Django's async chain instead hopped between the event loop and the thread four more
  times per request (our sync-only middleware sit between async-capable ones, and the
  sync view is called from the async core), each hop a wake-up of both sides;
* a body streamed from a sync iterator (WhiteNoise's static files, a ``FileResponse``) is
  read on that thread part by part. Django would read all of it into memory first, and
  warn each time, since it can only stream an async iterator.

WebSockets do not pass through here (Channels' consumers have their own threads).
"""

from __future__ import annotations

import asyncio
from collections import ChainMap
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.http import FileResponse, HttpRequest, HttpResponseBase

#: A file's body goes out in parts of about this size, each read in one hop to its thread.
FILE_PART_BYTES = 64 * 1024


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


class PooledThreadASGIHandler(ASGIHandler):
    """Django's handler, serving each HTTP request on a borrowed long-lived thread."""

    def __init__(self, threads: int) -> None:
        super().__init__()
        self.threads = threads
        self._created = 0
        # Last in, first out: the busiest threads stay warm, idle ones keep their connection.
        self._free: list[ThreadPoolExecutor] = []

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

    def _borrow(self) -> ThreadPoolExecutor | None:
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

    def close(self) -> None:
        """Close the idle kept threads' database connections and end those threads (a
        database cannot be dropped while a kept connection is open: the tests' teardown)."""
        while self._free:
            executor = self._free.pop()
            executor.submit(connections.close_all).result()
            executor.shutdown()
            self._created -= 1

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._borrow()
        kept = executor is not None
        if executor is None:  # every kept thread busy: a thread for this request alone
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overflow-request")
        try:
            # Always a context of this request's own, given its executor: a context without
            # one would defer to any context this task inherited, and uvicorn starts a
            # pipelined request's task from inside the previous request's send(), so it
            # inherits that request's context, already exited by the time it runs.
            # The context ends only after handle() awaited everything it started, so the
            # thread is free for the next request when it goes back.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if kept:
                self._free.append(executor)
            else:
                await asyncio.get_running_loop().run_in_executor(executor, connections.close_all)
                executor.shutdown(wait=False)


def get_asgi_application() -> PooledThreadASGIHandler:
    """Django's ``get_asgi_application`` with the pooled handler."""
    import django

    django.setup(set_prefix=False)
    return PooledThreadASGIHandler(settings.REQUEST_THREADS)
