"""The channels a notification goes out on, behind one small interface.

A channel gets a :class:`Job` (one notification to one target) and answers an
:class:`Outcome`; it neither retries nor writes the log (the dispatcher does both,
:mod:`tracker.notifications.notifier`). Native apps' push services would be one more
channel here.

* :class:`WebPush`: the payload encrypted as RFC 8291 says by pywebpush (``aes128gcm``),
  signed with VAPID (RFC 8292, py-vapid; each request signs a fresh claims dict, since
  pywebpush's ``webpush()`` writes into the one it is given), a ``TTL`` that is never 0,
  ``Urgency: high`` for milestones and the ``Topic`` of the order's moment. The endpoint is
  checked and resolved once per send and the request goes to the checked address (the
  TLS name and ``Host`` are the endpoint's), with no redirects followed.
* :class:`Email`: Django's email framework, to the SMTP relay the environment names; times
  in the customer's time zone, a preferences link and ``List-Unsubscribe``.
"""

from __future__ import annotations

import contextlib
import json
import smtplib
import time
from dataclasses import dataclass
from email.utils import format_datetime
from enum import Enum
from typing import Protocol
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core import mail, signing
from py_vapid import Vapid02
from pywebpush import WebPusher

from tracker.notifications import endpoints, vapid
from tracker.notifications.moments import HIGH_URGENCY, Moment, topic
from tracker.notifications.payload import LockScreen


class Result(Enum):
    SENT = "sent"
    GONE = "gone"  # 404/410: the subscription is no more
    RETRY = "retry"  # 429, 5xx, a timeout: try again later
    FAILED = "failed"  # refused for good
    UNKNOWN = "unknown"  # an email that may or may not have been delivered


@dataclass(frozen=True)
class Outcome:
    result: Result
    detail: str = ""
    #: For RETRY: the seconds the service asked to wait (``Retry-After``), if it did.
    retry_after: float | None = None


@dataclass(frozen=True)
class Job:
    """One notification to one target: a subscription's endpoint and keys, or a mail address."""

    payload: LockScreen
    moment: Moment
    #: push: the endpoint URL; email: the address.
    address: str
    p256dh: str = ""
    auth: str = ""
    #: email: the customer's user id, for the unsubscribe link.
    user_id: int = 0

    @property
    def destination(self) -> str:
        """What a slow destination holds up (the dispatcher's lanes): the push service's
        host, or the mail relay."""
        if "@" in self.address and not self.address.startswith("http"):
            return f"smtp:{settings.EMAIL_HOST}"
        return urlsplit(self.address).hostname or "?"


class Channel(Protocol):
    name: str

    def send(self, job: Job) -> Outcome: ...


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


class WebPush:
    """Web Push to browsers and installed web apps."""

    name = "push"

    def __init__(self) -> None:
        timeout = settings.NOTIFY_SEND_TIMEOUT_SECONDS
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, pool=timeout),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=settings.NOTIFY_WORKERS * 2),
            trust_env=False,  # no proxy from the environment: we connect where we checked
        )
        self._signer = Vapid02(private_key=vapid.private_key())

    def close(self) -> None:
        self._http.close()

    def _vapid_headers(self, target: endpoints.Target) -> dict[str, str]:
        default = 443 if target.scheme == "https" else 80
        port = "" if target.port == default else f":{target.port}"
        claims = {  # a fresh dict per request: nothing shared is written to
            "sub": settings.WEBPUSH_VAPID_SUBJECT,
            "aud": f"{target.scheme}://{target.host}{port}",
            "exp": int(time.time()) + 12 * 3600,
        }
        return self._signer.sign(claims)

    def send(self, job: Job) -> Outcome:
        try:
            target = endpoints.resolve(job.address)
        except endpoints.Refused as exc:
            return Outcome(Result.FAILED, f"endpoint refused: {exc}")
        info = {"endpoint": job.address, "keys": {"p256dh": job.p256dh, "auth": job.auth}}
        data = json.dumps(job.payload.to_json(), separators=(",", ":")).encode()
        body = WebPusher(info).encode(data, "aes128gcm")["body"]
        headers = {
            **self._vapid_headers(target),
            "TTL": str(max(1, settings.NOTIFY_PUSH_TTL_SECONDS)),
            "Urgency": "high" if job.moment in HIGH_URGENCY else "normal",
            "Topic": topic(job.payload.order_id, job.moment),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
        }
        parts = urlsplit(job.address)
        default = 443 if target.scheme == "https" else 80
        headers["Host"] = target.host if target.port == default else f"{target.host}:{target.port}"
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        last = ""
        for address in target.addresses:  # the checked addresses, never a new lookup
            literal = f"[{address}]" if ":" in address else address
            url = f"{target.scheme}://{literal}:{target.port}{path}"
            try:
                response = self._http.post(
                    url, content=body, headers=headers, extensions={"sni_hostname": target.host}
                )
            except httpx.ConnectError as exc:
                last = f"connect {address}: {exc}"
                continue  # the next checked address
            except httpx.HTTPError as exc:
                return Outcome(Result.RETRY, f"{type(exc).__name__}: {exc}")
            return self._judge(response)
        return Outcome(Result.RETRY, last or "no address")

    @staticmethod
    def _judge(response: httpx.Response) -> Outcome:
        code = response.status_code
        if 200 <= code < 300:
            return Outcome(Result.SENT)
        if code in (404, 410):
            return Outcome(Result.GONE, f"push service answered {code}")
        if code == 429 or code >= 500:
            return Outcome(Result.RETRY, f"push service answered {code}", _retry_after(response))
        return Outcome(Result.FAILED, f"push service answered {code}: {response.text[:120]}")


#: Salt of the signed one-click unsubscribe token (RFC 8058): a user id, nothing more.
UNSUBSCRIBE_SALT = "tracker.notifications.unsubscribe"


def unsubscribe_token(user_id: int) -> str:
    return signing.dumps(user_id, salt=UNSUBSCRIBE_SALT)


def user_of_unsubscribe_token(token: str) -> int | None:
    try:
        return int(signing.loads(token, salt=UNSUBSCRIBE_SALT))
    except (signing.BadSignature, TypeError, ValueError):
        return None


#: SMTP errors after which the mail was certainly not accepted: safe to try again.
_NOT_SENT = (
    ConnectionRefusedError,
    smtplib.SMTPConnectError,
    smtplib.SMTPHeloError,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPAuthenticationError,
)


class Email:
    """Email through Django's email framework (``EMAIL_HOST``/``EMAIL_PORT``)."""

    name = "email"

    def _message(self, job: Job) -> mail.EmailMessage:
        payload = job.payload
        site = settings.NOTIFY_SITE_URL.rstrip("/")
        order_url = f"{site}{payload.url}"
        preferences = f"{site}{settings.NOTIFY_PREFERENCES_PATH}"
        unsubscribe = f"{site}/api/v1/notifications/unsubscribe/{unsubscribe_token(job.user_id)}/"
        lines = [payload.title + ".", ""]
        if payload.body:
            lines += [payload.body, ""]
        if payload.window_start and job.moment in (Moment.OUT_FOR_DELIVERY, Moment.RUNNING_LATE):
            lines += [f"Times are {settings.NOTIFY_TIME_ZONE} time.", ""]
        lines += [
            f"Follow your order: {order_url}",
            "",
            f"Choose which emails you get: {preferences}",
            f"Stop these emails: {unsubscribe}",
        ]
        message = mail.EmailMessage(
            subject=payload.title,
            body="\n".join(lines) + "\n",
            to=[job.address],
            headers={
                "List-Unsubscribe": f"<{unsubscribe}>",
                "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
                "X-Ordertrack-Tag": payload.tag,
                "Date": format_datetime(_now_local(), usegmt=False),
            },
        )
        return message

    def send(self, job: Job) -> Outcome:
        message = self._message(job)
        # SMTP always, to EMAIL_HOST: not EMAIL_BACKEND, which a test runner swaps for
        # an in-memory outbox (the tests of this channel talk to a real SMTP server).
        connection = mail.get_connection(settings.NOTIFY_EMAIL_BACKEND, fail_silently=False)
        try:
            connection.open()  # no mail is sent in here: a failure is safe to retry
        except (smtplib.SMTPException, OSError) as exc:
            return Outcome(Result.RETRY, f"{type(exc).__name__}: {exc}"[:200])
        try:
            sent = connection.send_messages([message])
        except _NOT_SENT as exc:
            return Outcome(Result.RETRY, f"{type(exc).__name__}: {exc}"[:200])
        except (smtplib.SMTPException, OSError) as exc:
            # Inside the conversation: the relay may have accepted it. Never resent.
            return Outcome(Result.UNKNOWN, f"{type(exc).__name__}: {exc}"[:200])
        finally:
            with contextlib.suppress(smtplib.SMTPException, OSError):
                connection.close()  # the mail's fate was decided above
        return Outcome(Result.SENT) if sent == 1 else Outcome(Result.UNKNOWN, "not accepted")


def _now_local():
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    return datetime.now(UTC).astimezone(ZoneInfo(settings.NOTIFY_TIME_ZONE))
