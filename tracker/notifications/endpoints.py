"""A Web Push subscription is a URL the server will call: which ones it may call, and where.

Checked when a subscription is registered (400 naming the field) and again at every send
(:func:`resolve`, whose addresses the sender connects to: no second DNS lookup, so a name
that resolved to a public address when checked cannot be pointed at an internal one in
between; no redirects are followed).

* The scheme is ``https`` and the host is one of ``WEBPUSH_ALLOWED_HOSTS`` (the known
  browser push services; ``*.example`` matches any subdomain).
* Every address the host resolves to is a public unicast one: never loopback, private,
  link-local (which holds the cloud metadata address 169.254.169.254), shared, multicast,
  reserved or unspecified, nor an IPv4-mapped or NAT64 form of one.
* ``WEBPUSH_ALLOW_LOCAL`` (refused with debug off) lets ``make run`` and the tests use a
  push service on loopback, over http too; private, link-local and metadata addresses
  stay refused even then.

Keys: ``p256dh`` is a P-256 public key as an uncompressed point (65 bytes), ``auth`` 16
bytes, both base64url (RFC 8291), padded or not.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings

#: Addresses no subscription may reach, whatever the settings: cloud metadata services.
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


class Refused(ValueError):
    """A subscription the server will not call; the message says why (shown to the client)."""


@dataclass(frozen=True)
class Target:
    """Where to send: the URL as given, its host (for TLS and ``Host``) and the checked
    addresses to connect to."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def _b64(value: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as exc:
        raise Refused("must be base64url") from exc


def check_p256dh(value: str) -> str:
    """The key without padding; Refused unless it is a point of P-256, uncompressed."""
    raw = _b64(value)
    if len(raw) != 65 or raw[0] != 4:
        raise Refused("must be a P-256 public key: 65 bytes, an uncompressed point")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    except ValueError as exc:
        raise Refused("is not a point of the P-256 curve") from exc
    return value.rstrip("=")


def check_auth(value: str) -> str:
    """The secret without padding; Refused unless it is 16 bytes."""
    if len(_b64(value)) != 16:
        raise Refused("must be 16 bytes")
    return value.rstrip("=")


def _host_allowed(host: str) -> bool:
    for pattern in settings.WEBPUSH_ALLOWED_HOSTS:
        pattern = pattern.lower()
        if pattern == host or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def _local() -> bool:
    return settings.WEBPUSH_ALLOW_LOCAL


def check_address(address: str) -> None:
    """Refused unless the server may connect to ``address``."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in ipaddress.IPv6Network("64:ff9b::/96"):  # NAT64 of an IPv4 address
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in METADATA:
        raise Refused(f"resolves to {ip}, a cloud metadata address")
    if ip.is_loopback:
        if _local():
            return
        raise Refused(f"resolves to {ip}, a loopback address")
    if ip.is_link_local:
        raise Refused(f"resolves to {ip}, a link-local address")
    if ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_unspecified:
        raise Refused(f"resolves to {ip}, a private or reserved address")
    if not ip.is_global:
        raise Refused(f"resolves to {ip}, not a public address")


def check_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an endpoint the server may call (before resolving)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused("is not a URL") from exc
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None or parts.password is not None:
        raise Refused("must be an https URL with a host and no user name or password")
    if parts.scheme != "https" and not (parts.scheme == "http" and _local()):
        raise Refused("must be an https URL")
    if not _host_allowed(host) and not _local():
        raise Refused(f"{host} is not a known browser push service")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def resolve(url: str) -> Target:
    """The endpoint checked and resolved once: every address it resolves to must be one
    the server may call (:func:`check_address`), and those are what the sender uses."""
    scheme, host, port = check_url(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"{host} does not resolve") from exc
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        check_address(address)
    return Target(url, scheme, host, port, addresses)
