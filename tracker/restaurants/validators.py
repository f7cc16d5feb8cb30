"""Where a product's picture may come from: an https address, or a path under STATIC_URL.

One rule for every writer (Django admin, services, serializers). The menu page puts the
value into an ``<img src>`` and mobile apps load it as given, so anything a browser would
resolve somewhere else or run (``//host``, ``javascript:``, ``..``, a backslash) is refused
here rather than trusted later; plain http is refused because browsers block or flag
insecure pictures on a secure page.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

#: Characters no address may hold (RFC 3986): whitespace and control characters, and the
#: ones browsers rewrite or templates trip on. A backslash is read by browsers as "/".
_FORBIDDEN = re.compile(r'[\s\x00-\x1f\x7f-\x9f"<>\\^`{|}]')
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HTTPS = URLValidator(schemes=["https"])


def validate_image_url(value: str) -> None:
    """Refuse a picture address that is neither an https URL nor a file path under
    ``settings.STATIC_URL`` (read at each call: it carries the script prefix)."""
    static = settings.STATIC_URL
    rule = f"a picture is an https:// address or a path under {static}"
    if bad := _FORBIDDEN.search(value):
        raise ValidationError(
            f"Remove {_named(bad.group())} from the picture address: an address cannot "
            'contain spaces, control characters, backslashes or any of " < > ^ ` { | }.',
            code="image_url_character",
        )
    if value.startswith("//"):
        raise ValidationError(
            f"Addresses starting with // are refused: write the full https:// address ({rule}).",
            code="image_url_protocol_relative",
        )
    if scheme := _SCHEME.match(value):
        _check_https(value, scheme.group(1).lower(), rule)
    elif value.startswith("/"):
        _check_static_path(value, static)
    else:
        raise ValidationError(
            f"Enter an https:// address or a path under {static}, such as {static}menu/pizza.svg.",
            code="image_url_not_an_address",
        )


def _named(char: str) -> str:
    if char == " ":
        return "the space"
    return f"“{char}”" if char.isprintable() else f"U+{ord(char):04X}"


def _check_https(value: str, scheme: str, rule: str) -> None:
    if scheme == "http":
        raise ValidationError(
            "Plain http:// pictures are refused (browsers block or flag insecure pictures on "
            "a secure page): use the picture's https:// address.",
            code="image_url_insecure",
        )
    if scheme != "https":
        raise ValidationError(
            f"“{scheme}:” addresses are refused: {rule}.", code="image_url_scheme"
        )
    try:
        _HTTPS(value)
    except ValidationError:
        raise ValidationError(
            "Enter a valid https:// address, such as https://cdn.example.com/menu/pizza.svg.",
            code="image_url_invalid",
        ) from None
    if "@" in urlsplit(value).netloc:
        raise ValidationError(
            "Remove the user name and password from the address: every customer's browser "
            "showing the menu would be sent them.",
            code="image_url_credentials",
        )


def _check_static_path(value: str, static: str) -> None:
    if not (static.startswith("/") and value.startswith(static) and len(value) > len(static)):
        raise ValidationError(
            f"A path on this site must name a file under {static}, such as {static}menu/pizza.svg.",
            code="image_url_outside_static",
        )
    # Browsers resolve "." and ".." (also percent-encoded) before asking for the file.
    if {".", ".."} & set(unquote(urlsplit(value).path).split("/")):
        raise ValidationError(
            f"Remove the . and .. parts from the path: it must stay under {static}.",
            code="image_url_traversal",
        )
