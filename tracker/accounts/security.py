"""Request-level protections shared by the API, the browser pages and the admin.

* :func:`client_ip`: the caller's address as every per-address budget keys it, trusting
  ``X-Forwarded-For`` only as far as ``TRUSTED_PROXY_COUNT`` proxies we run ourselves (0 in
  embedded mode: the header is then ignored, so a client cannot pick its own throttle key);
  an IPv6 client is its /64.
* :func:`content_security_policy` and :data:`PERMISSIONS_POLICY`: what every answer allows
  the browser (config/middleware.py adds them).
* :class:`LoginRateLimiter`: counts login attempts per client and per user name, for
  every login path (API token, browser sign-in, admin sign-in); a device that signed in to
  the name before (:func:`device_cookie`) has a budget of its own instead of the name's.
* :func:`spend` (a fixed window) and :class:`TokenBucket` (a burst, refilled at a rate):
  budgets in the cache, shared by every process in production (Redis).
* API tokens: :func:`token_of` / :func:`user_for_token` (every lookup; issuing and
  revoking them are :mod:`tracker.accounts.services`'). A token key is sealed to its user's
  password hash (:func:`sealed_key`), so a password change revokes it wherever it is
  checked, whichever code path changed it; only the key's digest is stored
  (:mod:`tracker.accounts.models`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import secrets
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core import signing
from django.utils.crypto import constant_time_compare, salted_hmac

from tracker.accounts.rates import parse_rate
from tracker.cache import outage
from tracker.cache.counters import SlidingWindow, cache
from tracker.sharing.tokens import digest

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser


#: The IPv6 prefix one client is counted as: a host is routinely given a whole /64 and may
#: use any address in it, so a budget per full address would be one per request.
IPV6_CLIENT_PREFIX = 64


def client_key(address: str) -> str:
    """What one client's budgets are keyed on: an IPv4 address as it is (an IPv4-mapped
    IPv6 address as its IPv4 one), an IPv6 address as its /64; anything else unchanged."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone id is no new client
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)


def client_ip(meta: dict) -> str:
    """The client as every per-address budget keys it (:func:`client_key`): ``REMOTE_ADDR``,
    or the entry our last trusted proxy added.

    Each trusted proxy appends the address it received the request from, so with
    ``n`` proxies the client is the n-th entry from the right; anything further left
    was written by the client and is ignored.
    """
    remote = meta.get("REMOTE_ADDR") or ""
    proxies = settings.TRUSTED_PROXY_COUNT
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    if proxies <= 0 or not forwarded:
        return client_key(remote)
    addresses = [a.strip() for a in forwarded.split(",") if a.strip()]
    if not addresses:
        return client_key(remote)
    return client_key(addresses[-min(proxies, len(addresses))])


#: Where a page may use the phone's position: the courier's page, in our own origin only
#: (no frame may ask, and the pages use no other browser feature that needs one).
PERMISSIONS_POLICY = "geolocation=(self)"


def _tile_origin(tile_url: str) -> str | None:
    """The origin of a Leaflet tile URL template (``{s}`` subdomains: a wildcard)."""
    parts = urlsplit(tile_url.replace("{s}", "*"))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def content_security_policy(tile_url: str = "", relaxed: dict[str, str] | None = None) -> str:
    """The Content-Security-Policy of every answer: the pages load only their own module
    scripts, style sheets, images and fonts, and talk only to their own origin (HTTP and
    WebSocket: CSP's ``'self'`` covers ``ws(s)://`` of the page's host). No inline script
    or style, no ``eval``, no plugin, no ``<base>``, no framing, forms to ourselves only;
    a service worker (``worker-src``) from our origin. Configured map tiles (``tile_url``,
    Leaflet's template) are the one foreign origin an image may come from. ``relaxed``
    adds sources to a directive, for the one page that needs them (the API's Swagger UI)."""
    directives = {
        "default-src": "'self'",
        "script-src": "'self'",
        "style-src": "'self'",
        "img-src": " ".join(filter(None, ("'self'", _tile_origin(tile_url)))),
        "font-src": "'self'",
        "connect-src": "'self'",
        "worker-src": "'self'",
        "manifest-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'none'",
        "frame-ancestors": "'none'",
        "form-action": "'self'",
    }
    for name, sources in (relaxed or {}).items():
        directives[name] = f"{directives[name]} {sources}"
    return "; ".join(f"{name} {sources}" for name, sources in directives.items())


def login_name(username: str) -> str:
    """The account a sign-in attempt is aimed at, for its per-user-name budget.

    Django's sign-in forms strip the name and normalise it with NFKC (``ａlice`` signs in
    as ``alice``), and user names are stored NFKC-normalised; the lower-casing makes the
    budget shared by names that differ only in case (stricter than the lookup, never
    looser). Stripping again after NFKC catches spaces it produces (U+3000, U+00A0)."""
    return unicodedata.normalize("NFKC", username.strip()).strip().lower()


@dataclass(frozen=True)
class Refusal:
    retry_after: int
    reason: str


def spend(kind: str, ident: str, rate: tuple[int, int]) -> int | None:
    """Count one use of ``ident``'s ``kind`` budget, ``rate`` (count, seconds) in any window
    of that length, shared by every process (:class:`~tracker.cache.counters.SlidingWindow`):
    None while it lasts, else the seconds until enough uses have aged out for one more. A
    refused use counts too: a guesser gains nothing by hammering."""
    limit, period = rate
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    window = SlidingWindow(f"throttle:{kind}:{digest}", period)
    window.count()
    if window.spent() <= limit:
        return None
    return max(1, int(window.wait(limit) + 0.999))


class TokenBucket:
    """A budget of ``burst`` units, refilled at ``rate`` units a second, kept in the cache.

    Two entries: when counting started and the units spent since (an atomic ``incr``), so
    the processes sharing the cache never lose one another's spending. A bucket that would
    hold more than ``burst`` is re-based to hold exactly that; an idle bucket lapses from
    the cache once it would be full anyway.
    """

    def __init__(
        self, name: str, *, rate: float, burst: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        digest = hashlib.sha256(name.encode()).hexdigest()[:32]
        self._start, self._spent = f"bucket:{digest}:start", f"bucket:{digest}:spent"
        self._ttl = math.ceil(burst / rate) + 60

    def take(self, cost: int) -> float | None:
        """Take ``cost`` units (at most ``burst``): None when they were there, else the
        seconds until they will be (nothing is taken then)."""
        cost = min(cost, self.burst)
        now = self.clock()
        if cache.add(self._start, now, timeout=self._ttl):
            cache.set(self._spent, 0, timeout=self._ttl)  # a new or lapsed bucket is full
        start = cache.get(self._start, now)
        try:
            spent = cache.incr(self._spent, cost)
        except ValueError:  # lapsed between add and incr
            cache.set(self._spent, cost, timeout=self._ttl)
            spent = cost
        before = spent - cost
        available = self.burst + self.rate * (now - start) - before
        if available > self.burst:  # it was full: count from a start that makes it so
            cache.set(self._start, now - before / self.rate, timeout=self._ttl)
            available = self.burst
        if cost > available:
            cache.decr(self._spent, cost)
            return (cost - available) / self.rate
        cache.touch(self._start, self._ttl)
        cache.touch(self._spent, self._ttl)
        return None


#: The cookie a browser (or an app keeping cookies) gets when it signs in: its later
#: attempts at that user name spend a budget of their own, not the name's shared one.
DEVICE_COOKIE = "ordertrack_device"
_DEVICE_SALT = "tracker.accounts.security.device"


def device_cookie(username: str) -> str:
    """A signed device cookie for ``username``: the name and a random id (each device its
    own budget), unforgeable without ``SECRET_KEY``."""
    device = {"name": login_name(username), "id": secrets.token_urlsafe(12)}
    return signing.dumps(device, salt=_DEVICE_SALT)


def device_of(cookie: str | None, username: str) -> str | None:
    """The id of the device ``cookie`` says signed in to ``username`` before, or None
    (absent, forged, older than ``LOGIN_DEVICE_DAYS``, or another name's)."""
    if not cookie or not username:
        return None
    try:
        device = signing.loads(
            cookie, salt=_DEVICE_SALT, max_age=settings.LOGIN_DEVICE_DAYS * 86400
        )
    except signing.BadSignature:  # expired too (SignatureExpired is one)
        return None
    if not isinstance(device, dict) or device.get("name") != login_name(username):
        return None
    return str(device.get("id"))


class LoginRateLimiter:
    """Sliding-window counters in the cache (:func:`spend`).

    Every attempt counts, successful or not: a correct guess must not reset the budget.
    Limiting per user name stops a distributed guess at one account; limiting per
    client stops one machine from trying many accounts. The name's budget is shared by
    every client, so a few addresses can spend it; an attempt from a device that signed
    in to the name before (its :data:`DEVICE_COOKIE`) spends that device's own budget
    (the per-client rate) instead, so the owner is never locked out of their own devices.
    """

    def __init__(self, per_client: str | None = None, per_username: str | None = None) -> None:
        self.per_client = parse_rate(per_client or settings.LOGIN_THROTTLE_PER_CLIENT)
        self.per_username = parse_rate(per_username or settings.LOGIN_THROTTLE_PER_USERNAME)

    def _hit(self, kind: str, ident: str, rate: tuple[int, int]) -> int | None:
        return spend(f"login-{kind}", ident, rate)

    def attempt(
        self, *, client: str, username: str | None, device: str | None = None
    ) -> Refusal | None:
        """Count one attempt (``device``: the request's :data:`DEVICE_COOKIE`); a Refusal
        when a budget it spends is spent."""
        wait = self._hit("client", client, self.per_client)
        if wait is not None:
            return Refusal(wait, "Too many sign-in attempts from this address.")
        name = login_name(username) if username else ""
        known = device_of(device, name)
        if known is not None:
            wait = self._hit("device", f"{name}:{known}", self.per_client)
            if wait is not None:
                return Refusal(wait, "Too many sign-in attempts from this device.")
        elif name:
            wait = self._hit("user", name, self.per_username)
            if wait is not None:
                return Refusal(wait, "Too many sign-in attempts for this user name.")
        return None


# --------------------------------------------------------------------------- API tokens


def token_expired(token) -> bool:
    """True when ``token`` is older than ``API_TOKEN_TTL_DAYS`` (0 = tokens never expire)."""
    from datetime import timedelta

    from django.utils import timezone

    days = settings.API_TOKEN_TTL_DAYS
    return days > 0 and token.created < timezone.now() - timedelta(days=days)


#: A key's 40 hex digits: 20 random ones (80 bits), then 20 of their seal (see sealed_key):
#: 160 bits that whoever reads the database (which holds only their SHA-256) does not know.
_NONCE_DIGITS, _KEY_DIGITS = 20, 40
_SEAL_SALT = "tracker.accounts.security.token-seal"


def _seal(nonce: str, user: AbstractBaseUser, secret: str) -> str:
    value = f"{nonce}:{user.pk}:{user.password}"
    mac = salted_hmac(_SEAL_SALT, value, secret=secret, algorithm="sha256")
    return mac.hexdigest()[: _KEY_DIGITS - _NONCE_DIGITS]


def sealed_key(user: AbstractBaseUser) -> str:
    """A new token key for ``user``: random digits, then an HMAC (``SECRET_KEY``) of them,
    the user's id and their password *hash*, as Django binds a session to the password.

    The key then works only while the password is the one it was issued under: a reset
    (admin, ``changepassword``, a reset form, ``set_password`` + ``save``, even a bulk
    ``update``) revokes it at its next lookup, with no signal or hook that a code path could
    skip. The seal is an HMAC, so the key tells nothing about the password hash."""
    nonce = secrets.token_hex(_NONCE_DIGITS // 2)
    return nonce + _seal(nonce, user, settings.SECRET_KEY)


def key_fits(key: str, user: AbstractBaseUser) -> bool:
    """Whether ``key`` was sealed for ``user`` with their current password hash (under
    ``SECRET_KEY`` or one of ``SECRET_KEY_FALLBACKS``, so rotating the secret key as Django
    documents it does not sign every app out at once)."""
    if len(key) != _KEY_DIGITS:
        return False
    nonce, seal = key[:_NONCE_DIGITS], key[_NONCE_DIGITS:]
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return any(constant_time_compare(seal, _seal(nonce, user, k)) for k in keys)


def token_of(key: str):
    """The API token with this key (an :class:`~tracker.accounts.models.ApiToken`, its user
    loaded), or None: one query per API request, always, so a revoked token or a
    deactivated user is refused at once. The key is looked up by its digest (only that is
    stored); a key not sealed for its user's current password (:func:`key_fits`: the
    password changed since it was issued) is None too, as if deleted."""
    if len(key) != _KEY_DIGITS:
        return None  # no key we issued: no query
    return _token_where("digest", digest(key), key)


def token_by_id(token_id: int, stamp: str):
    """The API token ``token_id`` while ``stamp`` (a :func:`sealed_key` made when a socket
    ticket was issued for it) still fits its user's password, or None: what a socket
    signed in with a ticket re-checks, as a socket signed in with the key re-checks that."""
    return _token_where("id", token_id, stamp)


def _token_where(column: str, value: Any, seal: str):
    """Written out as SQL because compiling the ORM's ``select_related`` get cost several
    times more than running it."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tracker.accounts.models import ApiToken

    users, q = get_user_model(), connection.ops.quote_name
    found = list(
        users.objects.raw(
            f"SELECT u.*, t.{q('id')} AS token_id, t.{q('created')} AS token_created "
            f"FROM {q(users._meta.db_table)} u "
            f"JOIN {q(ApiToken._meta.db_table)} t ON t.{q('user_id')} = u.{q('id')} "
            f"WHERE t.{q(column)} = %s",
            [value],
        )
    )
    if not found or not key_fits(seal, found[0]):
        return None
    user = found[0]
    # A raw query converts only the model's own columns: the token's time as the ORM would.
    col = ApiToken._meta.get_field("created").get_col(ApiToken._meta.db_table)
    created = user.token_created
    for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
        created = convert(created, col, connection)
    return ApiToken(pk=user.token_id, user=user, created=created)


def _active_user(token):
    if token is None or token_expired(token) or not token.user.is_active:
        return None
    return token.user


def checked_user_for_token(key: str):
    """The active user a token key belongs to, or None (unknown, expired, deactivated, or
    issued before the user's password last changed), read from the database now: what a
    socket's checks ask, failing closed (an error) when the database cannot answer."""
    return _active_user(token_of(key))


def user_for_token(key: str):
    """:func:`checked_user_for_token`; while the database cannot be reached, the user the
    key signed in as lately (:func:`tracker.cache.outage.sign_in`), for tracking reads."""
    return outage.sign_in(key, checked_user_for_token)


def user_for_token_id(token_id: int, stamp: str):
    """As :func:`user_for_token`, for a socket signed in with a ticket (:func:`token_by_id`)."""
    return _active_user(token_by_id(token_id, stamp))
