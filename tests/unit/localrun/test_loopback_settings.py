"""The settings that keep ``make run`` on loopback (issue 69, N2), checked without
starting anything; tests/system/localrun/test_listening_sockets.py checks the sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from localrun.components import components
from localrun.pinot.conf import MAINS, ZOOKEEPER_MAIN, Ports, every_interface, zookeeper_args


def _properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def test_zookeeper_listens_on_loopback_without_an_admin_server(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (path,) = zookeeper_args(tmp_path, Ports(zookeeper=12181))
    conf = _properties(Path(path))
    assert conf["clientPort"] == "12181"
    assert conf["clientPortAddress"] == "127.0.0.1"
    assert conf["admin.enableServer"] == "false"
    assert conf["dataDir"] == str(tmp_path / "zookeeper")  # where StartZookeeper kept it
    assert MAINS["zookeeper"] == ZOOKEEPER_MAIN


def test_only_the_servers_query_ports_are_on_every_interface() -> None:
    ports = Ports(server=8098, server_admin=8097, extra_servers=((8198, 8197),))
    assert every_interface(ports) == [8098, 8198]


def test_the_stream_jobs_spark_driver_binds_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    (streaming,) = [c for c in components() if c.name == "streaming"]
    assert streaming.env is not None
    assert streaming.env["SPARK_LOCAL_IP"] == "127.0.0.1"
