"""``make run-prod`` tells no process to listen on every interface (issue 69, N2).

A container listens on 0.0.0.0 so that others reach it over compose's network
(docker-compose.yml's ``METRICS_HOST: 0.0.0.0`` for Prometheus, uvicorn's
``--host=0.0.0.0``); run as local processes on one machine, that would put the metrics
ports on the machine's network. The plan (localrun/compose/plan.py) must turn each
wildcard address into 127.0.0.1, in the single-node and the cluster topology.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localrun.compose.file import CLUSTER_FILE, COMPOSE_FILE
from localrun.compose.plan import plan

VARIABLES = {
    "DJANGO_SECRET_KEY": "k" * 50,
    "POSTGRES_PASSWORD": "pw",
    "ORDERTRACK_DOMAIN": "localhost",
    "SIMULATOR_DEMO_PASSWORD": "loopback-69",
}


@pytest.mark.parametrize(
    "files", [[COMPOSE_FILE], [COMPOSE_FILE, CLUSTER_FILE]], ids=["single", "cluster"]
)
def test_no_process_is_told_to_listen_on_every_interface(tmp_path: Path, files: list[Path]) -> None:
    run = plan(var=tmp_path, overrides=VARIABLES, demo=True, files=files)
    told = {
        name: [arg for arg in argv if "0.0.0.0" in arg]
        + [f"{key}={value}" for key, value in env.items() if "0.0.0.0" in value]
        for name, (argv, env) in {**run.processes, **run.one_shots}.items()
    }
    assert not {name: what for name, what in told.items() if what}
