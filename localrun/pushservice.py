"""A local Web Push service for ``make run`` and the tests: what FCM or autopush would do
with our requests, and the browser behind it.

It checks each request as a push service must before accepting it: a VAPID ``Authorization``
(RFC 8292) signed by the key it names, for this origin (``aud``), not expired, and that
key the server's, and a ``TTL``; then, as the browser would, it decrypts the body with the
subscription's private key and secret (RFC 8291, ``aes128gcm``). Each subscription is a
path, ``/push/<name>``, and its browser side (:class:`Browser`) keeps its keys. The tests
can tell a subscription to answer 404, 410 or 429 (its next requests) or never to answer
(a hung push service: it accepts the connection and holds the request until the sender gives
up).

``python -m localrun.pushservice`` (``make run``) subscribes a few demo customers' "phones"
(:func:`demo_customers`) through the REST API, as a browser would, turns their email on as
the settings page would (the mail sink keeps it), and writes each notification they receive
to ``var/push/<customer>.jsonl``. The simulator gives customers who are told of their
orders theirs early and regularly, so someone watching sees one within a minute. Allowed
only because ``make run`` sets ``WEBPUSH_ALLOW_LOCAL``.
"""

from __future__ import annotations

import base64
import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from localrun.ports import free_port


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """One subscription's browser side: its ECDH key pair and auth secret."""

    name: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: __import__("os").urandom(16))

    @property
    def p256dh(self) -> str:
        return _b64(
            self.key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )

    def keys(self) -> dict[str, str]:
        return {"p256dh": self.p256dh, "auth": _b64(self.auth)}


@dataclass(frozen=True)
class Received:
    name: str
    payload: dict[str, Any]
    headers: dict[str, str]  # names in lower case


class PushService:
    """The receiver: ``start()``, subscribe browsers, read what arrived."""

    def __init__(
        self, server_public_key: str, host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self.server_public_key = server_public_key
        self.host = host
        self.port = port or free_port()
        #: Called with each notification received (``make run`` writes it to a file).
        self.on_receive: Any = None
        self.browsers: dict[str, Browser] = {}
        self.answers: dict[str, list[int]] = {}  # name -> statuses to answer first
        self.hung: set[str] = set()
        self.received: list[Received] = []
        self.refused: list[str] = []  # why requests were refused (a bad signature, ...)
        self.requests: dict[str, int] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    def browser(self, name: str) -> Browser:
        return self.browsers.setdefault(name, Browser(name))

    def answer(self, name: str, *statuses: int) -> None:
        """Answer the subscription's next requests with these statuses, then 201."""
        self.answers[name] = list(statuses)

    def of(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r.payload for r in self.received if r.name == name]

    def start(self) -> PushService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, reply = service._take(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                if status is None:  # hung: answer nothing while the sender waits
                    if not service._hold(self.connection):
                        self.close_connection = True
                        return  # the sender gave up: its thread is free again
                    status = 503
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _hold(self, sock: socket.socket) -> bool:
        """Keep a hung request unanswered until :meth:`stop` (True) or until the sender
        closes its connection (False): many senders that time out leave no thread behind."""
        while not self._release.wait(0.2):
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    return False
            except OSError:  # reset by the sender
                return False
        return True

    def _verify(self, headers: dict[str, str]) -> str | None:
        """Why the request's VAPID is not acceptable, or None."""
        auth = headers.get("authorization", "")
        if not auth.startswith("vapid "):
            return f"no vapid Authorization: {auth!r}"
        if not Vapid02.verify(auth):
            return "VAPID signature does not verify"
        parts = dict(p.split("=", 1) for p in auth[len("vapid ") :].split(","))
        if parts["k"] != self.server_public_key:
            return "signed by another key than the server's"
        claims = json.loads(_unb64(parts["t"].split(".")[1]))
        if claims.get("aud") != self.origin:
            return f"aud {claims.get('aud')!r} is not {self.origin}"
        if not claims.get("exp", 0) > time.time():
            return "expired"
        if not str(claims.get("sub", "")).startswith("mailto:"):
            return "no sub"
        return None

    def _take(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int | None, bytes]:
        name = path.rsplit("/", 1)[-1]
        with self._lock:
            self.requests[name] = self.requests.get(name, 0) + 1
            if name in self.hung:
                return None, b""
            pending = self.answers.get(name)
            if pending:
                return pending.pop(0), b""
        why = self._verify(headers)
        if why is None and int(headers.get("ttl", "0")) <= 0:
            why = "TTL 0"
        browser = self.browsers.get(name)
        if why is None and browser is None:
            return 404, b""
        if why is not None:
            with self._lock:
                self.refused.append(why)
            return 401, why.encode()
        plain = http_ece.decrypt(
            body, private_key=browser.key, auth_secret=browser.auth, version="aes128gcm"
        )
        got = Received(name, json.loads(plain), headers)
        with self._lock:
            self.received.append(got)
        if self.on_receive is not None:
            self.on_receive(got)
        return 201, b""


def demo_customers() -> list[str]:
    """The demo customers whose phones ``make run`` subscribes (``PUSH_DEMO_PHONES``)."""
    from runtime.conf import env_int

    return [f"customer{n}" for n in range(1, env_int("PUSH_DEMO_PHONES", 3) + 1)]


def _api(
    web: str, path: str, body: dict | None = None, token: str = "", method: str | None = None
) -> dict:
    import urllib.request

    request = urllib.request.Request(
        f"{web}/api/v1/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Token {token}"} if token else {})},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def _subscribe(service: PushService, folder, web: str, customer: str, token: str) -> None:
    """Subscribe the customer's "phone": its keys kept in ``folder``, so the subscription
    stays the same across restarts of ``make run``."""
    keys_file = folder / f"{customer}.key.pem"
    browser = service.browser(customer)
    if keys_file.exists():
        browser.key = serialization.load_pem_private_key(keys_file.read_bytes(), None)
        browser.auth = (folder / f"{customer}.auth").read_bytes()
    else:
        keys_file.write_bytes(browser.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))  # fmt: skip
        (folder / f"{customer}.auth").write_bytes(browser.auth)
    body = {"endpoint": service.endpoint(customer), "keys": browser.keys(),
            "label": f"{customer}'s phone (make run's push service)"}  # fmt: skip
    _api(web, "notifications/subscriptions/", body, token=token)


def main() -> None:
    """``make run``'s push service: subscribe the demo customers' phones, keep what comes."""
    import os
    import signal

    from runtime.conf import env_int, env_str, var_dir

    web = f"http://{env_str('WEB_HOST', '127.0.0.1')}:{env_int('WEB_PORT', 8000)}"
    password = env_str("SIMULATOR_DEMO_PASSWORD", "ordertrack-demo")
    folder = var_dir() / "push"
    folder.mkdir(parents=True, exist_ok=True)
    customers = demo_customers()
    service = None
    subscribed = []
    for customer in customers:
        try:
            token = _api(web, "auth/token/", {"username": customer, "password": password})
            token = token["token"]
            if service is None:
                key = _api(web, "notifications/vapid-key/", token=token)["public_key"]
                service = PushService(key, port=env_int("PUSH_SERVICE_PORT", 8088)).start()
            _subscribe(service, folder, web, customer, token)
            _api(web, "notifications/preferences/", {"email_enabled": True}, token, "PATCH")
        except OSError as exc:  # no such demo customer (a run without the demo world), ...
            print(f"pushservice: {customer} not subscribed: {exc}", flush=True)
            continue
        subscribed.append(customer)
    if service is None:  # nobody to push to: stay up, idle, so the run goes on
        service = PushService("", port=env_int("PUSH_SERVICE_PORT", 8088)).start()

    def keep(got: Received) -> None:
        with (folder / f"{got.name}.jsonl").open("a") as out:
            out.write(json.dumps(got.payload) + "\n")
        print(f"pushservice: {got.name}: {got.payload['title']}", flush=True)

    service.on_receive = keep
    print(f"pushservice: ready on {service.origin}, {', '.join(subscribed) or 'nobody'} "
          f"subscribed (email on too), pushes in {folder}/<customer>.jsonl", flush=True)  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    stop.wait()
    service.stop()
    os._exit(0)


if __name__ == "__main__":
    main()
