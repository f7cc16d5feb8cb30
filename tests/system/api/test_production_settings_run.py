"""The health, metrics and sign-in paths under the production settings (issue 53).

The web's environment is compose's own (``DJANGO_DEBUG=false``, its allowed hosts, CSRF
origins, proxy count, metrics port), read from docker-compose.yml the way ``make run-prod``
reads it, with two local stand-ins: SQLite for PostgreSQL and the in-process cache for
Redis. The settings module loads in a fresh interpreter from that environment (no
``override_settings``), and every request is made as the proxy or Prometheus makes it,
so a fault that only production settings show (a 400 for a scrape, a redirect loop, a
CSRF failure on sign-in) fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from localrun import compose as prod
from runtime.conf import BASE_DIR
from tests.conftest import free_port

COMPOSE_VARS = {
    "DJANGO_SECRET_KEY": "k" * 50,
    "POSTGRES_PASSWORD": "pw",
    "ORDERTRACK_DOMAIN": "shop.example",
}

SCRIPT = r"""
import json, os, time, urllib.request
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from config.metrics_listener import serve_web_metrics

get_user_model().objects.create_user("prod-ops", password="prod-password-53", is_staff=True)
host = settings.ALLOWED_HOSTS[0]
proxied = {"HTTP_HOST": host, "HTTP_X_FORWARDED_PROTO": "https"}  # as the proxy sends it
out = {"debug": settings.DEBUG}
out["healthz"] = Client(**proxied).get("/healthz").status_code
out["healthz_over_http"] = Client(HTTP_HOST=host).get("/healthz").status_code
out["readyz_keys"] = sorted(Client(**proxied).get("/readyz").json())
sign_in = {"username": "prod-ops", "password": "prod-password-53"}
api = Client(**proxied)
out["token"] = api.post("/api/v1/auth/token/", sign_in, content_type="application/json").status_code
token = api.post("/api/v1/auth/token/", sign_in, content_type="application/json").json()["token"]
out["me"] = Client(**proxied).get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {token}").status_code
out["ops_readyz_keys"] = sorted(
    Client(**proxied).get("/readyz", HTTP_AUTHORIZATION=f"Token {token}").json()
)
out["bad_password"] = api.post(
    "/api/v1/auth/token/", {**sign_in, "password": "nope"}, content_type="application/json"
).status_code
browser = Client(enforce_csrf_checks=True, **proxied)
form = browser.get("/accounts/login/")
out["login_page"] = form.status_code
csrf = browser.cookies["csrftoken"].value
out["csrf_cookie_secure"] = bool(browser.cookies["csrftoken"]["secure"])
signed = browser.post(
    "/accounts/login/", {**sign_in, "csrfmiddlewaretoken": csrf}, HTTP_ORIGIN=f"https://{host}"
)
out["browser_sign_in"] = signed.status_code
out["session_cookie_secure"] = bool(browser.cookies["sessionid"]["secure"])
out["admin_login_page"] = Client(**proxied).get("/admin/login/").status_code
port = int(os.environ["PROBE_METRICS_PORT"])
server = serve_web_metrics(port)
scrape = urllib.request.Request(
    f"http://127.0.0.1:{port}/metrics",
    headers={"Host": "172.18.0.7:" + os.environ["WEB_METRICS_PORT"]},  # as Prometheus does
)
deadline = time.monotonic() + 60  # the alert's input: a series once the monitor has sampled
while True:
    with urllib.request.urlopen(scrape, timeout=10) as answer:
        text = answer.read().decode()
        out["metrics"] = answer.status
    out["stalled_metric"] = 'ordertrack_pipeline_stage_stalled{stage="relay"}' in text
    if out["stalled_metric"] or time.monotonic() > deadline:
        break
    time.sleep(0.5)
server.shutdown()
print("RESULT " + json.dumps(out))
"""


def test_health_metrics_and_sign_in_work_with_compose_production_settings(tmp_path):
    plan = prod.plan(var=tmp_path / "prod", overrides=COMPOSE_VARS)
    _, env = plan.processes["web"]
    assert env["DJANGO_DEBUG"] == "false" and env["WEB_METRICS_PORT"] == "9100"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "API_"))},
        **env,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'web.sqlite3'}",  # stands in for PostgreSQL
        "REDIS_URL": "",  # the in-process cache and channel layer stand in for Redis
        "METRICS_HOST": "127.0.0.1",
        "PROBE_METRICS_PORT": str(free_port()),
        "ORDERTRACK_VAR_DIR": str(tmp_path / "var"),
        # Multi-process mode, as config.asgi sets it for uvicorn's workers.
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }
    (tmp_path / "metrics").mkdir()
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=BASE_DIR, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out == {
        "debug": False,
        "healthz": 200,
        "healthz_over_http": 301,  # plain HTTP is redirected to HTTPS
        "readyz_keys": ["status"],
        "token": 200,
        "me": 200,
        "ops_readyz_keys": ["checks", "pipeline", "status"],
        "bad_password": 401,
        "login_page": 200,
        "csrf_cookie_secure": True,
        "browser_sign_in": 302,
        "session_cookie_secure": True,
        "admin_login_page": 200,
        "metrics": 200,
        "stalled_metric": True,
    }
