"""The one launcher (localrun.launch.System): a run of its own gets its own folder and free
ports, its components see them and the caller's environment does not change, and stopping
it stops every process it started."""

from __future__ import annotations

import os
import sys

import pytest

from localrun.components import Component
from localrun.launch import LaunchError, System

#: A component that prints its environment's addresses, says it is ready, then waits.
ECHO = [
    sys.executable,
    "-c",
    "import os, time; print(os.environ['WEB_PORT'], os.environ['ORDERTRACK_VAR_DIR']); "
    "print('echo: ready', flush=True); time.sleep(120)",
]


def test_a_run_of_its_own_has_its_folder_and_free_ports_and_stops_its_processes(tmp_path):
    before = dict(os.environ)
    system = System(comps=[Component("echo", ECHO, "echo: ready", 0)], workdir=tmp_path)
    assert os.environ == before  # chosen, not applied to the caller
    assert system.env["ORDERTRACK_VAR_DIR"] == str(tmp_path)
    assert system.web_url == f"http://127.0.0.1:{system.env['WEB_PORT']}"
    assert system.kafka == system.env["KAFKA_BOOTSTRAP_SERVERS"] != "127.0.0.1:19092"
    with system:
        process = system.child("echo").process
        assert system.pid("echo") == process.pid
    assert process.poll() is not None
    log = (tmp_path / "logs" / "echo.log").read_text()
    assert f"{system.env['WEB_PORT']} {tmp_path}" in log


def test_a_component_that_never_gets_ready_fails_the_start_and_is_stopped(tmp_path):
    exits = Component("broken", [sys.executable, "-c", "raise SystemExit(3)"], "never", 0)
    system = System(comps=[exits], workdir=tmp_path)
    with pytest.raises(LaunchError) as failed:
        system.start()
    assert not failed.value.interrupted
    assert system.child("broken").process.poll() == 3


def test_an_unknown_component_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no such component: nope"):
        System(["nope"], workdir=tmp_path)
