"""The VAPID key pair (RFC 8292) the server signs its Web Push requests with.

Its public half is the ``applicationServerKey`` a browser subscribes with, so the key must
stay the same for as long as subscriptions made with it should work. From
``WEBPUSH_VAPID_PRIVATE_KEY`` (PEM, or the raw 32-byte scalar in base64url; compose sets
it from the environment), else the PEM file ``WEBPUSH_VAPID_KEY_FILE``; with
``WEBPUSH_VAPID_GENERATE`` (debug's default) that file is made on first use (``make run`` and the tests: under ``var/``). With debug off
and neither set, Web Push is off (:func:`configured` is False; the key's endpoint 503).
"""

from __future__ import annotations

import base64
import functools
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings


class NotConfigured(RuntimeError):
    """No VAPID key: Web Push is off."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _from_text(text: str) -> ec.EllipticCurvePrivateKey:
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_private_key(text.encode(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("WEBPUSH_VAPID_PRIVATE_KEY must be a P-256 key")
        return key
    scalar = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return ec.derive_private_key(int.from_bytes(scalar, "big"), ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _file_key(path: Path, create: bool) -> ec.EllipticCurvePrivateKey:
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # O_EXCL: two processes starting at once keep the first one's key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(_pem(ec.generate_private_key(ec.SECP256R1())))
    if not path.exists():
        raise NotConfigured("no VAPID key: set WEBPUSH_VAPID_PRIVATE_KEY or WEBPUSH_VAPID_KEY_FILE")
    return _from_text(path.read_text())


@functools.cache
def private_key() -> ec.EllipticCurvePrivateKey:
    """The key pair (read once per process)."""
    if settings.WEBPUSH_VAPID_PRIVATE_KEY:
        return _from_text(settings.WEBPUSH_VAPID_PRIVATE_KEY)
    return _file_key(Path(settings.WEBPUSH_VAPID_KEY_FILE), create=settings.WEBPUSH_VAPID_GENERATE)


def private_pem() -> str:
    return _pem(private_key()).decode()


def public_key() -> str:
    """The ``applicationServerKey``: the public key as an uncompressed point, base64url
    (``WEBPUSH_VAPID_PUBLIC`` when set: the web processes need nothing more)."""
    if settings.WEBPUSH_VAPID_PUBLIC:
        return settings.WEBPUSH_VAPID_PUBLIC
    point = (
        private_key()
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return _b64(point)


def configured() -> bool:
    if settings.WEBPUSH_VAPID_PUBLIC:
        return True
    try:
        private_key()
    except NotConfigured:
        return False
    return True


def generate_pem() -> str:
    """A new private key, PEM: ``python -m tracker.notifications.vapid`` prints one (for
    ``WEBPUSH_VAPID_PRIVATE_KEY`` in production; ``--public`` prints a key's public half)."""
    return _pem(ec.generate_private_key(ec.SECP256R1())).decode()


def public_of_pem(pem: str) -> str:
    point = (
        _from_text(pem)
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return _b64(point)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--public"]:
        print(public_of_pem(sys.stdin.read()))
    else:
        print(generate_pem(), end="")
