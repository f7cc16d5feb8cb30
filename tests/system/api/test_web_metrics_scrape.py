"""Prometheus can scrape the web's metrics in production (issue 53, M3).

Compose's Prometheus scrapes each web replica by its container address: over plain HTTP,
with that address as ``Host``. With debug off, Django's public port answers such a request
400 (``DisallowedHost``) or redirects it to HTTPS, so the web's ``/metrics``, the input of
the critical ``PipelineStageStalled`` alert, must come from an internal listener that
Prometheus reaches and the public proxy does not, as every other process's does.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml
from django.test import Client

from tests.conftest import free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = {
    "DEBUG": False,
    "ALLOWED_HOSTS": ["shop.example"],
    "SECURE_SSL_REDIRECT": True,
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
}

pytestmark = pytest.mark.django_db


def _compose_web() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]


def _scraped_port() -> int:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "web")
    return int(job["dns_sd_configs"][0]["port"])


def _alerted_metric(alert: str) -> str:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert)
    return re.search(r"ordertrack_[a-z_]+", rule["expr"]).group(0)


def test_the_public_port_refuses_a_scrape_by_container_address(settings):
    """Why the listener exists: Django's answer to Prometheus's request on port 8000."""
    for name, value in PRODUCTION.items():
        setattr(settings, name, value)
    answer = Client().get("/metrics", HTTP_HOST="172.18.0.7:8000")
    assert answer.status_code == 400


def test_prometheus_scrapes_the_web_on_an_internal_listener_in_production(settings, monkeypatch):
    public = next(int(a.split("=")[1]) for a in _compose_web()["command"] if "--port=" in a)
    scraped = _scraped_port()
    assert scraped != public, (
        f"prometheus.yml scrapes the web's public port {public}: Django refuses the "
        "container address as Host (400) with debug off"
    )
    caddy = (ROOT / "deploy/Caddyfile").read_text()
    assert f"web:{scraped}" not in caddy  # the public proxy never reaches the listener
    env = _compose_web()["environment"]
    assert str(env["WEB_METRICS_PORT"]) == str(scraped)

    for name, value in PRODUCTION.items():
        setattr(settings, name, value)
    from config.metrics_listener import serve_web_metrics

    port = free_port()
    monkeypatch.setenv("METRICS_HOST", "127.0.0.1")
    server = serve_web_metrics(port)
    series = _alerted_metric("PipelineStageStalled") + '{stage="relay"}'

    def scrape() -> httpx.Response | None:
        answer = httpx.get(
            f"http://127.0.0.1:{port}/metrics", headers={"Host": f"172.18.0.7:{scraped}"}
        )
        assert answer.status_code == 200
        return answer if series in answer.text else None

    try:  # the monitor's first sample sets the series
        answer = wait_until(scrape, 30, f"{series} on the scraped page")
    finally:
        server.shutdown()
        server.server_close()
    assert "ordertrack_http_request_duration_seconds" in answer.text
