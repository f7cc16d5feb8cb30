"""The Pinot stand-in is read-only and local (issue 15, item 9).

Its DuckDB cannot touch files or the network whatever SQL reaches it, it never
waits on a body it was not told the length of, and it answers only to loopback
host names (or the ones configured), so a web page cannot read it by DNS rebinding.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

import duckdb
import httpx
import pytest


def _raw(url: str, request: bytes, timeout: float = 5.0) -> bytes:
    """Send bytes as they are (httpx would fix the headers) and read the reply."""
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize(
    "sql_template",
    [
        "SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM read_csv_auto('{secret}')",
        "SELECT content FROM read_text('{secret}')",
        "COPY (SELECT order_id FROM orders_enriched) TO '{out}'",
        "ATTACH '{out}' AS stolen",
        "INSTALL httpfs",
    ],
)
def test_files_and_extensions_are_out_of_reach_through_the_query_endpoint(
    local_pinot, tmp_path, sql_template
):
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    out = tmp_path / "out.csv"
    sql = sql_template.format(secret=secret, out=out)
    body = httpx.post(f"{local_pinot.url}/query/sql", json={"sql": sql}).json()
    assert body["exceptions"], body
    assert "resultTable" not in body
    assert "hunter2" not in str(body)
    assert not out.exists()
    # And below the SQL translator, in the database itself (defence in depth).
    with pytest.raises(duckdb.Error):
        local_pinot.server.store.cursor().execute(sql)
    assert not out.exists()


def test_the_database_cannot_be_switched_back_to_external_access(local_pinot):
    cursor = local_pinot.server.store.cursor()
    with pytest.raises(duckdb.Error):
        cursor.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.PermissionException):
        cursor.execute("SELECT * FROM read_csv('/etc/hostname')")


@pytest.mark.parametrize(
    "length_header, status",
    [("Content-Length: -1\r\n", b"400"), ("", b"411"), ("Content-Length: abc\r\n", b"400")],
)
def test_a_negative_or_missing_content_length_is_refused_without_waiting(
    local_pinot, length_header, status
):
    host = urlparse(local_pinot.url).netloc
    request = (
        f"POST /query/sql HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{length_header}\r\n"
    ).encode()  # no body, connection left open: reading "until the end" would hang
    reply = _raw(local_pinot.url, request)
    assert reply.split(b" ", 2)[1] == status, reply[:200]


def test_only_loopback_and_configured_host_names_are_served(local_pinot):
    port = urlparse(local_pinot.url).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert httpx.get(f"{local_pinot.url}/health", headers={"Host": host}).text == "OK"
    for host in (f"evil.example:{port}", "attacker.test", f"127.0.0.1.nip.io:{port}"):
        refused = httpx.get(f"{local_pinot.url}/health", headers={"Host": host})
        assert refused.status_code == 403, host
        query = httpx.post(
            f"{local_pinot.url}/query/sql",
            json={"sql": "SELECT COUNT(*) FROM orders_enriched"},
            headers={"Host": host},
        )
        assert query.status_code == 403 and "resultTable" not in query.text
    reply = _raw(local_pinot.url, b"GET /health HTTP/1.0\r\n\r\n")  # no Host at all
    assert reply.split(b" ", 2)[1] == b"403"


def test_extra_host_names_can_be_configured(monkeypatch):
    from embedded.pinot_server import allowed_hosts, host_name

    monkeypatch.setenv("PINOT_LOCAL_ALLOWED_HOSTS", "pinot-local, tracker.internal")
    hosts = allowed_hosts("127.0.0.1")
    assert {"pinot-local", "tracker.internal", "127.0.0.1", "localhost"} <= hosts
    assert host_name("Pinot-Local:8099") in hosts
    assert host_name("[::1]:8099") == "[::1]" and host_name("[::1]:8099") in hosts
    assert host_name("evil.example") not in hosts
